// Package poisontest builds hostile payloads for the subject of a valid
// event: what a device (or a JetStream answer aimed by the reply trick) can
// store on a subject it may publish on. Every reader of a stream is tested
// against them: it must skip and count each one and go on. Only tests import
// it (internal/hygiene checks).
package poisontest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Case is one poison payload for the subject of the base event.
type Case struct {
	// Name describes the payload in a sentence.
	Name string
	// Payload is the message body.
	Payload []byte
	// Reason is why a reader skips it. ReasonInvalidData marks an envelope
	// that DecodeStored accepts and whose data does not decode into its
	// type's struct: only readers that decode the data skip it.
	Reason events.SkipReason
}

// MaxPayload is the size of the largest poison body on a subject the
// control plane writes: the streams' 1 MiB message limit minus room for the
// headers. On a device's report subject it is events.MaxReportData (see
// MaxBody).
const MaxPayload = 1<<20 - 4096

// Hidden is text a hostile device puts in every string it reports: a
// right-to-left override and every other character that is invisible or
// reorders the text around it (bidirectional embeddings, overrides,
// isolates and marks, zero-width characters, line separators, a byte-order
// mark, C0 and C1 controls with a terminal escape). Whatever shows device
// text to a person (a CR's status, kubectl, the dashboard) must show none
// of them raw (events.Printable).
const Hidden = "v1\u202egnp.exe\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200b\u200c\u200d\u200e\u200f\u061c\u2028\u2029\ufeff\x00\x1b[31m\x7f\u0085"

// MaxBody is the size of the largest poison body stored on subject: less
// than the largest message its stream stores, with room for headers.
func MaxBody(subject string) int {
	if stream, err := events.StreamOf(subject); err == nil && (stream == events.StreamReports || stream == events.StreamTelemetry || stream == events.StreamLiveness) {
		return events.MaxReportData
	}
	return MaxPayload
}

// Oversized returns bodies for the subject base is stored on that its
// stream refuses: they are stored nowhere, so no reader ever sees them. A
// device's report subjects refuse anything over events.MaxReportSize
// (below the device account's max_payload, so the device stays
// connected); the other streams over events.MaxEventSize.
func Oversized(tb testing.TB, base events.Event) []Case {
	tb.Helper()
	subject, err := base.Subject()
	if err != nil {
		tb.Fatal(err)
	}
	limit := events.MaxEventSize
	if MaxBody(subject) == events.MaxReportData {
		limit = events.MaxReportSize
	}
	good, err := base.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(good, &m); err != nil {
		tb.Fatal(err)
	}
	m["data"] = map[string]any{"error": string(bytes.Repeat([]byte("e"), limit)), "agentVersion": Hidden}
	huge, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return []Case{
		{Name: "a body one byte over the stream's largest message", Payload: bytes.Repeat([]byte("A"), limit+1)},
		{Name: "an envelope whose data is over the stream's largest message", Payload: huge},
	}
}

// For returns the poison payloads for the subject base is stored on. base
// must be a valid event.
func For(tb testing.TB, base events.Event) []Case {
	tb.Helper()
	info, ok := base.Type.Info()
	if !ok {
		tb.Fatalf("poisontest: base event of unknown type %q", base.Type)
	}
	mutate := func(change func(m map[string]any)) []byte {
		b, err := base.Marshal()
		if err != nil {
			tb.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			tb.Fatal(err)
		}
		change(m)
		out, err := json.Marshal(m)
		if err != nil {
			tb.Fatal(err)
		}
		return out
	}
	good, err := base.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	subject, err := base.Subject()
	if err != nil {
		tb.Fatal(err)
	}
	maxBody := MaxBody(subject)
	keys := func(k events.Keys) map[string]any {
		m := map[string]any{}
		for name, v := range map[string]string{"namespace": k.Namespace, "name": k.Name, "device": k.Device} {
			if v != "" {
				m[name] = v
			}
		}
		return m
	}
	// Keys that name another subject of the same family, and a type of
	// another subject with the same keys.
	other, extra := base.Keys, base.Keys
	var otherType events.Type
	switch info.Family {
	case events.FamilyReport, events.FamilyCommand:
		other.Device = base.Keys.Device + "-x"
		extra.Namespace, extra.Name = "lab", "api"
		otherType = events.TypeDeviceHeartbeat
		if info.Report == events.ReportHeartbeat {
			otherType = events.TypeDeviceInventory
		}
		if info.Family == events.FamilyCommand {
			otherType = events.TypeCommandResult
		}
	default:
		other.Name = base.Keys.Name + "-x"
		extra.Device = "d1"
		otherType = events.TypeDeploymentDeleted
		if info.Family != events.FamilyDeploymentRollout {
			otherType = events.TypeRolloutFailed
		}
	}
	return []Case{
		{"a payload that is not JSON", []byte("not json"), events.ReasonNotAnEnvelope},
		{"an empty body", nil, events.ReasonNotAnEnvelope},
		{"a body of white space", []byte(" \n\t "), events.ReasonNotAnEnvelope},
		{"JSON null", []byte("null"), events.ReasonNotAnEnvelope},
		{"a JSON array", []byte(`[1,2,3]`), events.ReasonNotAnEnvelope},
		{"a JSON string", []byte(`"fleet"`), events.ReasonNotAnEnvelope},
		{"a JetStream publish acknowledgement aimed here by the reply trick", []byte(`{"stream":"FLEET_REPORTS","seq":5}`), events.ReasonNotAnEnvelope},
		{"a JetStream API error aimed here by the reply trick", []byte(`{"type":"io.nats.jetstream.api.v1.pub_ack_response","error":{"code":503,"err_code":10077,"description":"nope"}}`), events.ReasonUnknownType},
		{"a truncated envelope", good[:len(good)/2], events.ReasonNotAnEnvelope},
		{"a body of almost the stream's largest message", bytes.Repeat([]byte("A"), maxBody), events.ReasonNotAnEnvelope},
		{"an envelope of almost the stream's largest message with a huge type", mutate(func(m map[string]any) { m["type"] = string(bytes.Repeat([]byte("t"), maxBody-len(good))) }), events.ReasonUnknownType},
		{"an envelope of an unknown type", mutate(func(m map[string]any) { m["type"] = "device.selfie" }), events.ReasonUnknownType},
		{"an envelope of version 0", mutate(func(m map[string]any) { m["version"] = 0 }), events.ReasonInvalidEnvelope},
		{"an envelope of a version newer than this build knows", mutate(func(m map[string]any) { m["version"] = info.Version + 1 }), events.ReasonUnsupportedVersion},
		{"an envelope with a zero id", mutate(func(m map[string]any) { m["id"] = "00000000000000000000000000" }), events.ReasonInvalidEnvelope},
		{"an envelope with a malformed id", mutate(func(m map[string]any) { m["id"] = "not-a-ulid" }), events.ReasonNotAnEnvelope},
		{"an envelope with a zero time", mutate(func(m map[string]any) { m["time"] = time.Time{} }), events.ReasonInvalidEnvelope},
		{"an envelope whose version is a string", mutate(func(m map[string]any) { m["version"] = "1" }), events.ReasonNotAnEnvelope},
		{"an envelope whose data is not an object", mutate(func(m map[string]any) { m["data"] = []int{1} }), events.ReasonInvalidEnvelope},
		{"an envelope without data", mutate(func(m map[string]any) { delete(m, "data") }), events.ReasonInvalidEnvelope},
		{"an envelope whose keys are not valid tokens", mutate(func(m map[string]any) {
			m["keys"] = keys(events.Keys{Namespace: "a.b", Name: "*", Device: ">"})
		}), events.ReasonInvalidEnvelope},
		{"an envelope whose keys add a key its subject cannot carry", mutate(func(m map[string]any) { m["keys"] = keys(extra) }), events.ReasonInvalidEnvelope},
		{"an envelope whose keys name another subject of its family", mutate(func(m map[string]any) { m["keys"] = keys(other) }), events.ReasonSubjectMismatch},
		{"an envelope of a type that belongs on another subject", mutate(func(m map[string]any) { m["type"] = string(otherType) }), events.ReasonSubjectMismatch},
		{"an envelope whose data does not decode into its type", mutate(func(m map[string]any) {
			m["data"] = map[string]any{"uid": 7, "generation": "x", "agentVersion": 7, "uptimeNs": "x", "os": 7, "labels": "x",
				"namespace": 7, "deployment": 7, "phase": 7, "since": 7, "revisionId": 7, "command": 7, "commandId": 7, "ok": "x",
				"targets": "x", "counts": "x", "task": 7, "taskRun": 7, "chunk": "x", "requestedBy": 7,
				"reason": 7, "windowSeconds": "x", "services": "x", "workloads": "x", "truncated": "x"}
		}), events.ReasonInvalidData},
	}
}
