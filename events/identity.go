package events

import (
	"encoding/json"
	"fmt"
)

// IdentityEntry is the value of a fleet-identity KV entry, keyed by
// IdentityKey(identity subject). The operator writes it from Device
// resources (spec.identitySubject → metadata.name as Device, the blacklist
// label → Quarantined); the auth callout reads it on every connect and
// watches it to disconnect devices that are quarantined or removed. JSON:
//
//	{"device":"<id>","quarantined":false}
type IdentityEntry struct {
	// Device is the device id (the Device's name), a valid device token.
	Device string `json:"device"`
	// Quarantined is true while the Device carries the blacklist label.
	Quarantined bool `json:"quarantined"`
}

// Validate checks the entry: Device must be a valid device token
// (ValidateToken); the error wraps the *TokenError.
func (e IdentityEntry) Validate() error {
	if err := ValidateToken(TokenDevice, e.Device); err != nil {
		return fmt.Errorf("fleet-identity value: %w", err)
	}
	return nil
}

// Encode validates the entry and returns the JSON the operator writes.
func (e IdentityEntry) Encode() ([]byte, error) {
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// DecodeIdentityEntry parses a fleet-identity value and validates it. A
// value that is not JSON, or that names no valid device, is an error: the
// callout then refuses the identity, and the operator does not count the
// key as another device's registration.
func DecodeIdentityEntry(b []byte) (IdentityEntry, error) {
	var v IdentityEntry
	if err := json.Unmarshal(b, &v); err != nil {
		return IdentityEntry{}, fmt.Errorf("fleet-identity value is not JSON: %w", err)
	}
	if err := v.Validate(); err != nil {
		return IdentityEntry{}, err
	}
	return v, nil
}
