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

// ErrDeviceWritten is wrapped when the control plane tries to append to a
// subject only devices write (the report and telemetry streams). Those
// streams never acknowledge (NoAck): a device's messages reach them through
// a stream import with the reply subject the device chose, and an
// acknowledgement sent there would be a reply the device aims (ADR 0006).
// A stand-in device uses Store.Report.
var ErrDeviceWritten = errors.New("device-written subject")

// ErrPlanMisaligned is wrapped when a revision's TargetBatches do not agree
// with its Targets, Canaries and Plan (CheckPlan): a reader refuses such a
// revision rather than fold a plan whose batches it cannot trust.
var ErrPlanMisaligned = errors.New("the revision's targetBatches do not match its targets and plan")

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

// ErrUndecodable is wrapped (through *RecordError) by every error about one
// stored record that is not a valid event for the subject it was stored on.
// Readers skip and count such a record and go on with the next one; it never
// stops a reader. Use errors.As with *RecordError for where it is stored.
var ErrUndecodable = errors.New("undecodable record")

// SkipReason says why a stored record is undecodable. It is the reason
// label of fleet_events_skipped_records_total: a small fixed set, never text
// taken from the record.
type SkipReason string

// Skip reasons.
const (
	// ReasonNotAnEnvelope: the payload is empty, not JSON, or JSON that is
	// not an event envelope (wrong shapes).
	ReasonNotAnEnvelope SkipReason = "not-an-envelope"
	// ReasonUnknownType: the envelope's type is not in this build's
	// catalogue.
	ReasonUnknownType SkipReason = "unknown-type"
	// ReasonUnsupportedVersion: the envelope's schema version is newer than
	// this build knows.
	ReasonUnsupportedVersion SkipReason = "unsupported-version"
	// ReasonInvalidEnvelope: a zero id or time, a version below 1, keys that
	// do not build a subject for the type, data that is not a JSON object.
	ReasonInvalidEnvelope SkipReason = "invalid-envelope"
	// ReasonSubjectMismatch: the envelope is valid but its type and keys
	// name another subject than the one the stream stored it on (a device
	// reporting for another device, a type of another family).
	ReasonSubjectMismatch SkipReason = "subject-mismatch"
	// ReasonInvalidData: the envelope is valid but its data does not decode
	// into its type's data struct. Readers that decode data report it.
	ReasonInvalidData SkipReason = "invalid-data"
)

// SkipReasons lists every skip reason.
func SkipReasons() []SkipReason {
	return []SkipReason{ReasonNotAnEnvelope, ReasonUnknownType, ReasonUnsupportedVersion, ReasonInvalidEnvelope,
		ReasonSubjectMismatch, ReasonInvalidData}
}

// RecordError is one stored record that does not decode: where it is
// stored, its size and why. Its message never quotes the payload (payloads
// on device-writable subjects are hostile and may be 1 MiB): only the
// location, the size, the reason and a detail built from this package's own
// words. It unwraps to ErrUndecodable and to Err.
type RecordError struct {
	// Stream, Subject and Sequence say where the record is stored.
	Stream   string
	Subject  string
	Sequence uint64
	// Size is the payload's length in bytes (for ReasonInvalidData, the
	// data's).
	Size int
	// Reason classifies the failure.
	Reason SkipReason
	// Err is the decode error; it wraps ErrInvalidEvent, ErrUnknownType or
	// ErrUnsupportedVersion and never quotes the payload.
	Err error
}

// Error implements error.
func (e *RecordError) Error() string {
	return fmt.Sprintf("%s seq %d on %s: %s (%s, %d bytes): %v",
		e.Stream, e.Sequence, e.Subject, ErrUndecodable.Error(), e.Reason, e.Size, e.Err)
}

// Unwrap lets errors.Is match ErrUndecodable and the decode error.
func (e *RecordError) Unwrap() []error { return []error{ErrUndecodable, e.Err} }

// AsRecordError returns the *RecordError in err's chain, if any: the
// "skip and count" case of a reader, as opposed to an error that stops it.
func AsRecordError(err error) (*RecordError, bool) {
	var re *RecordError
	if errors.As(err, &re) {
		return re, true
	}
	return nil, false
}
