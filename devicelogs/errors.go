package devicelogs

import (
	"errors"
	"fmt"

	"github.com/nationtech/harmony-fleet/events"
)

// Sentinel errors a Stream or Open returns; each says what happened in
// words an operator can act on.
var (
	// ErrDenied: the reader may not read this device's logs.
	ErrDenied = errors.New("not allowed to read this device's logs")
	// ErrNoAnswer: the device did not answer the request in time.
	ErrNoAnswer = errors.New("the device did not answer: it is offline, not connected to this control plane, or its agent does not know the logs command")
	// ErrDeviceGone: the device went silent while following.
	ErrDeviceGone = errors.New("the device stopped answering: it disconnected or lost its control-plane connection")
	// ErrTooManyStreams: this reader already has MaxStreamsPerDevice
	// streams of the device open (Open), or the device answers as many
	// as it may, for every reader together (Next; ADR 0025).
	ErrTooManyStreams = errors.New(events.LogsTooManyStreams)
	// ErrFollowLimit: the stream followed for MaxFollow.
	ErrFollowLimit = errors.New("followed for the maximum time")
	// ErrReaderBehind: the consumer did not keep up with what the device
	// sent within the bounds.
	ErrReaderBehind = errors.New("the reader fell behind the device's output")
	// ErrCutOff: the device broke a bound of the path (*CutOffError says
	// which).
	ErrCutOff = errors.New("the device was cut off")
)

// Reasons a device is cut off (CutOffError.Reason, the reason label of
// fleet_devicelogs_cutoffs_total).
const (
	ReasonSize        = "size"
	ReasonDecode      = "decode"
	ReasonSequence    = "sequence"
	ReasonBytes       = "bytes"
	ReasonRate        = "rate"
	ReasonUnrequested = "unrequested"
)

// reasons are every cut-off reason, for the metric's series.
var reasons = []string{ReasonSize, ReasonDecode, ReasonSequence, ReasonBytes, ReasonRate, ReasonUnrequested}

// CutOffError: the device broke a bound; the stream ended and the device
// was asked to stop. It is ErrCutOff.
type CutOffError struct {
	Device string
	Reason string
	// Detail says what was seen, never the device's bytes.
	Detail string
}

func (e *CutOffError) Error() string {
	return fmt.Sprintf("device %s cut off (%s): %s", e.Device, e.Reason, e.Detail)
}

// Is makes a *CutOffError ErrCutOff.
func (e *CutOffError) Is(target error) bool { return target == ErrCutOff }

// DeviceError: the agent ended the stream with an error of its own (the
// service does not exist, the engine failed). Message is its text, made
// printable and cut.
type DeviceError struct{ Message string }

func (e *DeviceError) Error() string { return "the device answered: " + e.Message }
