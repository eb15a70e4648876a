package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"
)

// DecodeStored decodes the payload of a message a stream stored on subject,
// as every reader of a stream must: the payload must be a valid envelope of a
// type and version this build knows, and the subject its type and keys build
// must be exactly the subject it was stored on. The subject is authoritative:
// a report stored on fleet.report.<a>.workload whose keys name device b, or a
// heartbeat stored on a workload subject, is refused, so a device can only
// ever speak for itself (its permissions pin the subjects it may publish on,
// not what it writes in them).
//
// A refusal is a *RecordError (errors.Is ErrUndecodable) carrying the
// subject, the stream that holds it, the payload's size and a SkipReason;
// readers that know the stream sequence set Sequence. Its message never
// quotes the payload. Readers skip such a record, count it and go on: a
// record on a device-writable subject is data, never control.
func DecodeStored(subject string, payload []byte) (Event, error) {
	ev, reason, err := decodeStored(subject, payload)
	if err != nil {
		stream, _ := StreamOf(subject)
		return Event{}, &RecordError{Stream: stream, Subject: subject, Size: len(payload), Reason: reason, Err: err}
	}
	return ev, nil
}

func decodeStored(subject string, payload []byte) (Event, SkipReason, error) {
	return decodeStoredWith(subject, payload, unmarshalEnvelope)
}

// decodeStoredWith is decodeStored with unmarshal decoding the envelope
// (the tests compare the strict reader's answers with encoding/json's).
func decodeStoredWith(subject string, payload []byte, unmarshal func([]byte) (Event, error)) (Event, SkipReason, error) {
	if len(bytes.TrimSpace(payload)) == 0 {
		return Event{}, ReasonNotAnEnvelope, fmt.Errorf("%w: payload is empty", ErrInvalidEvent)
	}
	e, err := unmarshal(payload)
	if err != nil {
		// The JSON error may quote the payload (a literal, a time): only
		// the syntax error's offset is repeated.
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			return Event{}, ReasonNotAnEnvelope, fmt.Errorf("%w: payload is not an event envelope: JSON syntax error at byte %d", ErrInvalidEvent, syn.Offset)
		}
		return Event{}, ReasonNotAnEnvelope, fmt.Errorf("%w: payload is not an event envelope", ErrInvalidEvent)
	}
	if e.Type == "" {
		// JSON, but no envelope: a JetStream acknowledgement, a stray
		// object.
		return Event{}, ReasonNotAnEnvelope, fmt.Errorf("%w: payload is not an event envelope: it has no type", ErrInvalidEvent)
	}
	info, ok := e.Type.Info()
	if !ok {
		// The type is the writer's text: its length only.
		return Event{}, ReasonUnknownType, fmt.Errorf("%w: a type of %d bytes that this build's catalogue does not list", ErrUnknownType, len(e.Type))
	}
	switch {
	case e.ID == (ulid.ULID{}):
		return Event{}, ReasonInvalidEnvelope, fmt.Errorf("%w: %s: id is zero", ErrInvalidEvent, e.Type)
	case e.Time.IsZero():
		return Event{}, ReasonInvalidEnvelope, fmt.Errorf("%w %s (%s): time is zero", ErrInvalidEvent, e.ID, e.Type)
	case e.Version < 1:
		return Event{}, ReasonInvalidEnvelope, fmt.Errorf("%w %s (%s): version %d, must be 1 or more", ErrInvalidEvent, e.ID, e.Type, e.Version)
	case e.Version > info.Version:
		return Event{}, ReasonUnsupportedVersion, fmt.Errorf("%w: event %s is %s version %d; this build knows up to %d",
			ErrUnsupportedVersion, e.ID, e.Type, e.Version, info.Version)
	}
	if d := bytes.TrimSpace(e.Data); len(d) == 0 || d[0] != '{' {
		return Event{}, ReasonInvalidEnvelope, fmt.Errorf("%w %s (%s): data must be a JSON object", ErrInvalidEvent, e.ID, e.Type)
	}
	if info.Family == FamilyReport && onlyFamilyKeys(info.Family, e.Keys) && isReportSubject(subject, e.Keys.Device, info.Report) {
		// The report's own subject, checked without building it; the
		// device key shares the subject's bytes.
		e.Keys.Device = subject[len(rootReport)+1 : len(rootReport)+1+len(e.Keys.Device)]
		return e, "", nil
	}
	built, err := e.Keys.Subject(info.Family, info.Report)
	if err != nil || !onlyFamilyKeys(info.Family, e.Keys) {
		// The token error quotes the writer's key: not repeated.
		return Event{}, ReasonInvalidEnvelope, fmt.Errorf("%w %s (%s): its keys do not build a %s subject", ErrInvalidEvent, e.ID, e.Type, info.Family)
	}
	if built != subject {
		// Both subjects are safe to name: built is made of validated
		// tokens, subject is what the server stored.
		return Event{}, ReasonSubjectMismatch, fmt.Errorf("%w %s: a %s with these keys belongs on %s, not on %s",
			ErrInvalidEvent, e.ID, e.Type, built, subject)
	}
	return e, "", nil
}

// isReportSubject reports whether subject is ReportSubject(device, kind)
// and device a valid token, without building the subject.
func isReportSubject(subject, device string, kind ReportKind) bool {
	rest, ok := strings.CutPrefix(subject, rootReport+".")
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, device)
	if !ok || rest != "."+string(kind) {
		return false
	}
	return ValidateToken(TokenDevice, device) == nil && kind.Valid()
}

// familyKeys returns k without the keys family f does not use.
func familyKeys(f Family, k Keys) Keys {
	switch f {
	case FamilyReport, FamilyCommand, FamilyDashboardDevice:
		return Keys{Device: k.Device}
	case FamilyDashboardAlert:
		return Keys{Name: k.Name}
	default:
		return Keys{Namespace: k.Namespace, Name: k.Name}
	}
}

// onlyFamilyKeys reports whether k sets no key that family f does not use:
// namespace and name for intent and rollout subjects, device for report,
// command and dashboard device subjects, name alone for dashboard alert
// subjects.
func onlyFamilyKeys(f Family, k Keys) bool {
	switch f {
	case FamilyReport, FamilyCommand, FamilyDashboardDevice:
		return k.Namespace == "" && k.Name == ""
	case FamilyDashboardAlert:
		return k.Namespace == "" && k.Device == ""
	default:
		return k.Device == ""
	}
}

// InvalidData returns the *RecordError of a stored record whose envelope
// decoded but whose data does not decode into its type's struct; err is
// Decode's error. The result keeps err's sentinel (errors.Is
// ErrUnknownType, ErrUnsupportedVersion or ErrInvalidEvent) but not its
// text, which may quote the data. Size is the data's length.
func InvalidData(rec Record, err error) *RecordError {
	base, reason := ErrInvalidEvent, ReasonInvalidData
	switch {
	case errors.Is(err, ErrUnsupportedVersion):
		base, reason = ErrUnsupportedVersion, ReasonUnsupportedVersion
	case errors.Is(err, ErrUnknownType):
		base = ErrUnknownType
	}
	return &RecordError{Stream: rec.Stream, Subject: rec.Subject, Sequence: rec.Sequence, Size: len(rec.Event.Data), Reason: reason,
		Err: fmt.Errorf("%w: the data of %s event %s does not decode into its struct", base, rec.Event.Type, rec.Event.ID)}
}
