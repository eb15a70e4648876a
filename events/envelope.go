package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
)

// Event is the immutable envelope every Fleet event carries. Its JSON form
// is the message payload; its ID is also sent as the Nats-Msg-Id header, so a
// retried append is stored once.
type Event struct {
	// ID is a ULID: unique, and sortable by creation time.
	ID ulid.ULID `json:"id"`
	// Type names the event; see the Type constants.
	Type Type `json:"type"`
	// Version is the schema version of Data for this Type.
	Version int `json:"version"`
	// Time is when the writer created the event (UTC).
	Time time.Time `json:"time"`
	// Keys are the subject keys; the subject is derived from Type and Keys.
	Keys Keys `json:"keys"`
	// Correlation ties the event to a Deployment revision, where it applies.
	Correlation *Correlation `json:"correlation,omitempty"`
	// Data is the type's data struct as a JSON object.
	Data json.RawMessage `json:"data"`
}

// Correlation identifies the Deployment revision an event belongs to.
type Correlation struct {
	DeploymentUID string `json:"deploymentUid"`
	Generation    int64  `json:"generation"`
}

// Option adjusts an event built by New.
type Option func(*Event)

// WithCorrelation sets the Deployment UID and generation the event belongs to.
func WithCorrelation(uid string, generation int64) Option {
	return func(e *Event) { e.Correlation = &Correlation{DeploymentUID: uid, Generation: generation} }
}

// WithTime sets the event time (default: now). Tests and importers use it.
func WithTime(t time.Time) Option { return func(e *Event) { e.Time = t.UTC() } }

// WithID sets the event id (default: a new ULID). A writer that retries an
// append after a crash reuses the id it persisted, so the retry is deduped.
func WithID(id ulid.ULID) Option { return func(e *Event) { e.ID = id } }

// New builds an event of data's type with a fresh ULID and the current time,
// and validates it: the keys must build a valid subject for the type. Keys
// the type's family does not use (a device key on an intent event, a
// namespace on a report) are dropped: readers refuse an envelope whose keys
// differ from its subject's (see DecodeStored).
func New(keys Keys, data Data, opts ...Option) (Event, error) {
	t := data.EventType()
	info, ok := t.Info()
	if !ok {
		return Event{}, fmt.Errorf("%w %q: build rollout data with NewRolloutTransition", ErrUnknownType, t)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("encode %s data: %w", t, err)
	}
	ev := Event{ID: ulid.Make(), Type: t, Version: info.Version, Time: time.Now().UTC(), Keys: familyKeys(info.Family, keys), Data: raw}
	for _, o := range opts {
		o(&ev)
	}
	if err := ev.Validate(); err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Subject derives the event's subject from its type and keys.
func (e Event) Subject() (string, error) {
	info, ok := e.Type.Info()
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownType, e.Type)
	}
	return e.Keys.Subject(info.Family, info.Report)
}

// Validate checks the envelope: known type, non-zero id and time, keys that
// build a valid subject and no key the type's family does not use, data that
// is a JSON object.
func (e Event) Validate() error {
	_, err := e.validate(true)
	return err
}

// validate checks the envelope and returns its subject; fullData also checks
// that Data is valid JSON (Marshal does that itself).
func (e Event) validate(fullData bool) (string, error) {
	if e.ID == (ulid.ULID{}) {
		return "", fmt.Errorf("%w: id is zero; build events with events.New", ErrInvalidEvent)
	}
	if e.Time.IsZero() {
		return "", fmt.Errorf("%w %s: time is zero", ErrInvalidEvent, e.ID)
	}
	if e.Version < 1 {
		return "", fmt.Errorf("%w %s: version %d, must be 1 or more", ErrInvalidEvent, e.ID, e.Version)
	}
	subject, err := e.Subject()
	if err != nil {
		return "", fmt.Errorf("%w %s (%s): %w", ErrInvalidEvent, e.ID, e.Type, err)
	}
	if info, _ := e.Type.Info(); !onlyFamilyKeys(info.Family, e.Keys) {
		return "", fmt.Errorf("%w %s (%s): keys set a key the %s family does not use (its subject could not carry it)",
			ErrInvalidEvent, e.ID, e.Type, info.Family)
	}
	if d := bytes.TrimSpace(e.Data); len(d) == 0 || d[0] != '{' || (fullData && !json.Valid(d)) {
		return "", fmt.Errorf("%w %s (%s): data must be a JSON object", ErrInvalidEvent, e.ID, e.Type)
	}
	return subject, nil
}

// Marshal encodes the envelope as the message payload. It writes the JSON by
// hand (the same bytes encoding/json would produce, without its reflection
// and the re-compaction of Data): appending is on the hot path.
func (e Event) Marshal() ([]byte, error) {
	if !json.Valid(e.Data) {
		return nil, fmt.Errorf("%w %s (%s): data is not valid JSON", ErrInvalidEvent, e.ID, e.Type)
	}
	b := make([]byte, 0, 192+len(e.Data))
	b = append(b, `{"id":"`...)
	b = append(b, e.ID.String()...)
	b = append(b, `","type":`...)
	b = appendString(b, string(e.Type))
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(e.Version), 10)
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","keys":{`...)
	sep := ""
	for _, kv := range [3][2]string{{"namespace", e.Keys.Namespace}, {"name", e.Keys.Name}, {"device", e.Keys.Device}} {
		if kv[1] == "" {
			continue
		}
		b = append(b, sep...)
		b = appendString(b, kv[0])
		b = append(b, ':')
		b = appendString(b, kv[1])
		sep = ","
	}
	b = append(b, '}')
	if c := e.Correlation; c != nil {
		b = append(b, `,"correlation":{"deploymentUid":`...)
		b = appendString(b, c.DeploymentUID)
		b = append(b, `,"generation":`...)
		b = strconv.AppendInt(b, c.Generation, 10)
		b = append(b, '}')
	}
	b = append(b, `,"data":`...)
	b = append(b, bytes.TrimSpace(e.Data)...)
	return append(b, '}'), nil
}

// appendString appends s as a JSON string. Tokens and type names are plain
// ASCII and take the fast path; anything else goes through encoding/json.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Unmarshal decodes a message payload into an envelope and validates it. It
// does not know where the payload was stored: every reader of a stream uses
// DecodeStored instead, which also checks the envelope against its subject
// and the version against this build.
func Unmarshal(payload []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(payload, &e); err != nil {
		return Event{}, fmt.Errorf("%w: payload is not an event envelope: %w", ErrInvalidEvent, err)
	}
	if err := e.Validate(); err != nil {
		return Event{}, err
	}
	return e, nil
}

// typeAcceptor is implemented (on the pointer) by data structs shared by
// several types, such as RolloutTransition.
type typeAcceptor interface {
	acceptType(Type) bool
}

func (d *RolloutTransition) acceptType(t Type) bool {
	info, ok := t.Info()
	if !ok || info.Family != FamilyDeploymentRollout {
		return false
	}
	d.typ = t
	return true
}

// Decode returns the event's data as T. It fails with ErrUnknownType when the
// event is not of T's type and with ErrUnsupportedVersion when the event's
// schema version is newer than this build knows. Unknown fields are ignored,
// so data structs may grow. Workload reports and rollout transitions in the
// form encoding/json writes them are read by the strict reader
// (fastdata.go), to the same value.
func Decode[T Data](e Event) (T, error) {
	if v, ok := decodeStrict[T](e); ok {
		return v, nil
	}
	return decodeJSON[T](e)
}

// decodeJSON is Decode with encoding/json alone (the tests compare the
// two).
func decodeJSON[T Data](e Event) (T, error) {
	var v T
	if a, ok := any(&v).(typeAcceptor); ok {
		if !a.acceptType(e.Type) {
			return v, fmt.Errorf("%w: event %s is %q, not a %T", ErrUnknownType, e.ID, e.Type, v)
		}
	} else if v.EventType() != e.Type {
		return v, fmt.Errorf("%w: event %s is %q, not %q", ErrUnknownType, e.ID, e.Type, v.EventType())
	}
	info, _ := e.Type.Info()
	if e.Version > info.Version {
		return v, fmt.Errorf("%w: event %s is %s version %d; this build knows up to %d",
			ErrUnsupportedVersion, e.ID, e.Type, e.Version, info.Version)
	}
	if err := json.Unmarshal(e.Data, &v); err != nil {
		return v, fmt.Errorf("decode %s data of event %s: %w", e.Type, e.ID, err)
	}
	if a, ok := any(&v).(typeAcceptor); ok {
		a.acceptType(e.Type) // Unmarshal does not touch the unexported type.
	}
	return v, nil
}

func (d *WorkloadHealth) acceptType(t Type) bool {
	info, ok := t.Info()
	if !ok || info.Family != FamilyReport || info.Report != ReportHealth {
		return false
	}
	d.typ = t
	return true
}
