package agent

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// TestOnlyTheDevicesOwnStoredValueIsRunAsNotified: the bucket republishes
// each value once stored, with the stream's headers; only a notification
// that is exactly that, for this device, is run without a read. Anything
// else is a hint (a direct get decides).
func TestOnlyTheDevicesOwnStoredValueIsRunAsNotified(t *testing.T) {
	const own = `{"device":"d1","deployments":[{"namespace":"lab","name":"web","uid":"u","generation":1}]}`
	msg := func(data string, headers ...string) *nats.Msg {
		m := nats.NewMsg("fleet.notify.intent.d1")
		m.Data = []byte(data)
		for i := 0; i+1 < len(headers); i += 2 {
			m.Header.Set(headers[i], headers[i+1])
		}
		return m
	}
	for _, tc := range []struct {
		name string
		m    *nats.Msg
		run  bool
	}{
		{"the device's value as republished is run", msg(own, "Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "7"), true},
		{"a value republished for another key is a hint", msg(own, "Nats-Subject", "$KV.fleet-intent.d2", "Nats-Sequence", "7"), false},
		{"a value without a sequence is a hint", msg(own, "Nats-Subject", "$KV.fleet-intent.d1"), false},
		{"a value with sequence 0 is a hint", msg(own, "Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "0"), false},
		{"a value without the stream's headers is a hint", msg(own), false},
		{"a delete marker is a hint", msg("", "Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "8", "KV-Operation", "DEL"), false},
		{"a status message is a hint", msg("", "Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "8", "Status", "408"), false},
		{"another device's value is a hint", msg(`{"device":"d2","deployments":[]}`, "Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "7"), false},
		{"a value that does not decode is a hint", msg("not json", "Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "7"), false},
		{"an entry with an invalid name is a hint", msg(`{"device":"d1","deployments":[{"namespace":"lab","name":"a b"}]}`,
			"Nats-Subject", "$KV.fleet-intent.d1", "Nats-Sequence", "7"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sv, ok := storedIntent(tc.m, "d1")
			if ok != tc.run {
				t.Fatalf("storedIntent = %+v, %v; want run %v", sv, ok, tc.run)
			}
			if ok && (sv.seq != 7 || sv.intent.Device != "d1" || len(sv.intent.Deployments) != 1) {
				t.Errorf("stored value %+v, want d1's at sequence 7", sv)
			}
		})
	}
}
