package events_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

// TestTheIdentityEntryJSONIsPinned: the operator writes the fleet-identity
// value with Encode and the auth callout reads it with DecodeIdentityEntry;
// the bytes are the contract between them (docs/security.md).
func TestTheIdentityEntryJSONIsPinned(t *testing.T) {
	tests := []struct {
		name  string
		entry events.IdentityEntry
		json  string
	}{
		{"a device in service", events.IdentityEntry{Device: "edge-1"}, `{"device":"edge-1","quarantined":false}`},
		{"a quarantined device", events.IdentityEntry{Device: "rpi_7", Quarantined: true}, `{"device":"rpi_7","quarantined":true}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.entry.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.json, string(b)); diff != "" {
				t.Errorf("encoding (-want +got):\n%s", diff)
			}
			back, err := events.DecodeIdentityEntry([]byte(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if back != tc.entry {
				t.Errorf("decoded %+v, want %+v", back, tc.entry)
			}
		})
	}
}

func TestAnInvalidIdentityEntryIsRefused(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    string
		isToken bool
	}{
		{"text that is not JSON", `edge-1`, "fleet-identity value is not JSON: invalid character 'e' looking for beginning of value", false},
		{"a device of the wrong JSON type", `{"device":7}`, "fleet-identity value is not JSON: json: cannot unmarshal number into Go struct field IdentityEntry.device of type string", false},
		{"no device", `{"quarantined":false}`, `fleet-identity value: invalid device "": must not be empty`, true},
		{"a device that is no subject token", `{"device":"a.b"}`, `fleet-identity value: invalid device "a.b": must not contain '.', the NATS subject separator; use '-' instead`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.DecodeIdentityEntry([]byte(tc.value))
			if err == nil {
				t.Fatal("accepted")
			}
			if diff := cmp.Diff(tc.want, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if errors.Is(err, events.ErrInvalidToken) != tc.isToken {
				t.Errorf("errors.Is(ErrInvalidToken) = %v, want %v", !tc.isToken, tc.isToken)
			}
		})
	}
}

func TestAnIdentityEntryThatTheCalloutWouldRefuseIsNeverEncoded(t *testing.T) {
	if b, err := (events.IdentityEntry{Device: "a b"}).Encode(); !errors.Is(err, events.ErrInvalidToken) {
		t.Errorf("encoded %s, %v", b, err)
	}
}
