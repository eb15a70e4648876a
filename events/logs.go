// Device logs (ADR 0025): the answer subject of a logs command, the
// command's options and the chunks a device answers with. Logs are never
// stored: no stream captures fleet.logs.>.

package events

import (
	"fmt"
	"time"
)

// rootLogs is the root of the device logs family.
const rootLogs = "fleet.logs"

// Agent commands of the device logs path (AgentCommand.Command).
const (
	// CommandLogs asks the agent for a container's log (AgentCommand.Logs).
	CommandLogs = "logs"
	// CommandLogsStop asks the agent to stop answering the logs request
	// AgentCommand.Logs names (its Reader and Request).
	CommandLogsStop = "logs-stop"
	// CommandDiagnose asks the agent for a DeviceDiagnosis, answered in
	// one LogsChunk on the request's subject (AgentCommand.Logs names the
	// ids only).
	CommandDiagnose = "diagnose"
)

// LogsIDLength is the length of a reader id and of a request id: 32
// lowercase hex digits (128 random bits).
const LogsIDLength = 32

// ValidateLogsID checks a reader or request id (kind names which).
func ValidateLogsID(kind, id string) error {
	ok := len(id) == LogsIDLength
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
	}
	if !ok {
		return fmt.Errorf("%w: %s %q must be %d lowercase hex digits", ErrInvalidSubject, kind, id, LogsIDLength)
	}
	return nil
}

// LogsSubject is fleet.logs.<device>.<reader>.<request>: where a device
// answers one logs request of one reader. A device may publish only under
// its own device token (the auth callout's permissions).
func LogsSubject(device, reader, request string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	if err := ValidateLogsID("reader id", reader); err != nil {
		return "", err
	}
	if err := ValidateLogsID("request id", request); err != nil {
		return "", err
	}
	return rootLogs + "." + device + "." + reader + "." + request, nil
}

// LogsReaderFilter is fleet.logs.<device>.<reader>.*: every answer of one
// device to one reader, the one subscription a reader holds per device it
// reads.
func LogsReaderFilter(device, reader string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	if err := ValidateLogsID("reader id", reader); err != nil {
		return "", err
	}
	return rootLogs + "." + device + "." + reader + ".*", nil
}

// DeviceLogsPublish is fleet.logs.<device>.*.*: what the auth callout lets
// a device publish of the family.
func DeviceLogsPublish(device string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return rootLogs + "." + device + ".*.*", nil
}

// MaxLogsFollow bounds LogsRequest.FollowSeconds: one hour.
const MaxLogsFollow = time.Hour

// LogsRequest is AgentCommand.Logs: which container's log a reader asks
// for and where the answer goes.
type LogsRequest struct {
	// Reader and Request are the answer subject's ids (LogsSubject),
	// chosen by the reader.
	Reader  string `json:"reader"`
	Request string `json:"request"`
	// Namespace and Deployment name the Deployment; Service one of its
	// services or its init container.
	Namespace  string `json:"namespace,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	Service    string `json:"service,omitempty"`
	// Tail is how many of the last lines to send first (0: every line).
	Tail int `json:"tail,omitempty"`
	// Since, when set, sends only lines printed at or after it.
	Since time.Time `json:"since,omitzero"`
	// Follow sends new lines as they are printed, for at most
	// FollowSeconds (0: the agent's maximum).
	Follow        bool `json:"follow,omitempty"`
	FollowSeconds int  `json:"followSeconds,omitempty"`
}

// ValidateIDs checks the answer subject's ids: all a logs-stop or a
// diagnose needs.
func (r LogsRequest) ValidateIDs() error {
	if err := ValidateLogsID("logs.reader: reader id", r.Reader); err != nil {
		return err
	}
	return ValidateLogsID("logs.request: request id", r.Request)
}

// Validate checks a logs request.
func (r LogsRequest) Validate() error {
	if err := r.ValidateIDs(); err != nil {
		return err
	}
	if err := ValidateToken(TokenNamespace, r.Namespace); err != nil {
		return fmt.Errorf("logs.namespace: %w", err)
	}
	if err := ValidateToken(TokenName, r.Deployment); err != nil {
		return fmt.Errorf("logs.deployment: %w", err)
	}
	if r.Service == "" {
		return fmt.Errorf("logs.service: name the service (or the init container) to read")
	}
	if err := ValidateToken(TokenName, r.Service); err != nil {
		return fmt.Errorf("logs.service: %w", err)
	}
	if r.Tail < 0 {
		return fmt.Errorf("logs.tail: %d is negative: give 0 (every line) or more", r.Tail)
	}
	if r.FollowSeconds < 0 || time.Duration(r.FollowSeconds)*time.Second > MaxLogsFollow {
		return fmt.Errorf("logs.followSeconds: %d is outside 0–%d", r.FollowSeconds, int(MaxLogsFollow/time.Second))
	}
	return nil
}

// LogLine is one line of a LogsChunk.
type LogLine struct {
	// Time is when the engine recorded the line (zero when it did not
	// say).
	Time time.Time `json:"t,omitzero"`
	// Text is the line without its end: valid UTF-8, redacted on the
	// device, otherwise as printed (escapes included: print it with care).
	Text string `json:"l"`
}

// LogsTooManyStreams begins the Error of the last chunk with which an
// agent refuses a logs request because it already answers as many as it
// may (whatever readers asked them): a reader tells it from the device's
// other errors by this prefix.
const LogsTooManyStreams = "too many log streams of this device are open"

// LogsChunk is one message on a LogsSubject. Seq counts from 1 without a
// gap; the last chunk has End (and Error when the log could not be read to
// the end). A chunk with no lines while following is a keep-alive.
type LogsChunk struct {
	Seq   uint64    `json:"seq"`
	Sent  time.Time `json:"sent"`
	Lines []LogLine `json:"lines,omitempty"`
	End   bool      `json:"end,omitempty"`
	Error string    `json:"error,omitempty"`
	// Diagnosis answers a CommandDiagnose (the only chunk, with End).
	Diagnosis *DeviceDiagnosis `json:"diagnosis,omitempty"`
}

// Bounds of a DeviceDiagnosis (it fits one chunk).
const (
	MaxDiagnosisPasses    = 5
	MaxDiagnosisWorkloads = 32
	MaxDiagnosisError     = 256
)

// DeviceDiagnosis is a device's answer to CommandDiagnose: what an
// operator needs to see why a workload does not run well there.
type DeviceDiagnosis struct {
	AgentVersion string `json:"agentVersion,omitempty"`
	// Engine names the container engine and its version ("podman
	// 4.3.1").
	Engine string `json:"engine,omitempty"`
	// Containers are the agent's containers, as in device.containers.
	Containers DeviceContainers `json:"containers"`
	// Ports are the published ports of each container, by
	// "<namespace>/<deployment>/<name>".
	Ports map[string][]string `json:"ports,omitempty"`
	// DiskFree and DiskTotal are bytes of the file system of the agent's
	// state folder (or /); MemAvailable and MemTotal of the host's
	// memory. Zero when unknown.
	DiskFree     uint64 `json:"diskFree,omitempty"`
	DiskTotal    uint64 `json:"diskTotal,omitempty"`
	MemAvailable uint64 `json:"memAvailable,omitempty"`
	MemTotal     uint64 `json:"memTotal,omitempty"`
	// Passes are the agent's last passes, newest last.
	Passes []PassRecord `json:"passes,omitempty"`
	// Workloads are the last status the agent reported of each
	// Deployment, its error cut at MaxDiagnosisError bytes.
	Workloads []WorkloadStatus `json:"workloads,omitempty"`
}

// PassRecord is one agent pass: when it ended, how long it took and its
// result (converged, failed, error).
type PassRecord struct {
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
	Result  string    `json:"result"`
}
