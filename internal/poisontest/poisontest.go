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

// MaxPayload is the size of the largest poison body: the streams' 1 MiB
// message limit minus room for the headers.
const MaxPayload = 1<<20 - 4096

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
		{"a body of almost 1 MiB", bytes.Repeat([]byte("A"), MaxPayload), events.ReasonNotAnEnvelope},
		{"an envelope of almost 1 MiB with a huge type", mutate(func(m map[string]any) { m["type"] = string(bytes.Repeat([]byte("t"), MaxPayload-len(good))) }), events.ReasonUnknownType},
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
				"targets": "x", "counts": "x", "task": 7, "taskRun": 7, "chunk": "x", "requestedBy": 7}
		}), events.ReasonInvalidData},
	}
}
