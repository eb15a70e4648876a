package events

import (
	"errors"
	"fmt"
)

// ErrInvalidToken is wrapped by every error about a subject or KV-key token
// (namespace, name, device, identity subject) that breaks a rule. Use
// errors.As with *TokenError for the details.
var ErrInvalidToken = errors.New("invalid subject token")

// ErrInvalidSubject is wrapped by errors from the subject parsers when a
// subject does not belong to any Fleet subject family.
var ErrInvalidSubject = errors.New("invalid fleet subject")

// ErrConflict is returned (wrapped in *ConflictError) by an append whose
// expected last subject sequence is stale: another writer appended to the
// subject first. Nothing was written. The caller re-reads and re-decides.
var ErrConflict = errors.New("event append conflict: stale expected sequence")

// ErrUnknownType is wrapped when an event carries a type this build does not
// know, or data is decoded into the struct of another type.
var ErrUnknownType = errors.New("unknown event type")

// ErrUnsupportedVersion is wrapped when an event's schema version is newer
// than the version this build can decode.
var ErrUnsupportedVersion = errors.New("unsupported event schema version")

// ErrInvalidEvent is wrapped when an event is malformed: a zero id or time, a
// missing key its type needs, or data that is not a JSON object.
var ErrInvalidEvent = errors.New("invalid event")

// ErrNotFound is returned when a read finds no message for a subject.
var ErrNotFound = errors.New("no event found")

// ErrConfigMismatch is wrapped when provisioning finds a stream or bucket
// whose configuration differs from the contract after an update attempt (the
// server refused or clamped a field).
var ErrConfigMismatch = errors.New("stream configuration does not match the contract")

// TokenError describes one token that breaks a rule.
type TokenError struct {
	// Kind names the token: "namespace", "name", "device" or "identity subject".
	Kind string
	// Value is the offending token, quoted in the message.
	Value string
	// Rule is the rule it breaks, phrased as the fix.
	Rule string
}

// Error implements error.
func (e *TokenError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, e.Value, e.Rule)
}

// Unwrap lets errors.Is match ErrInvalidToken.
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

// ConflictError is the typed form of ErrConflict.
type ConflictError struct {
	// Subject the append targeted.
	Subject string
	// Expected is the last subject sequence the writer expected.
	Expected uint64
	// Server is the server's description of the conflict.
	Server string
}

// Error implements error.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("append to %s expecting last subject sequence %d: %s: %s",
		e.Subject, e.Expected, ErrConflict.Error(), e.Server)
}

// Unwrap lets errors.Is match ErrConflict.
func (e *ConflictError) Unwrap() error { return ErrConflict }
