package events

import (
	"bytes"
	"encoding/json"
)

// The strict reader of the envelopes encoding/json writes (json.Marshal of
// an Event, which every writer of the streams uses): the fields in the
// struct's order, each at most once, no whitespace around them, strings
// of plain printable ASCII without escapes, integers as JSON writes them,
// and a data object. Anything else (another order, a repeated, unknown or
// differently cased field, whitespace, an escape, a null, a number out of
// range, nesting deeper than maxFastDepth) makes it give up, and
// decodeStored decodes with encoding/json. So what it accepts it reads
// exactly as encoding/json does, and everything else, hostile records
// included, gets encoding/json's answer (TestTheEnvelopeReaderReadsAsEncodingJSON
// and FuzzEnvelopeReader compare the two). It reads each byte once and
// does not reflect: decoding the envelope was three quarters of a history
// reader's CPU (docs/history.md, "Cost").

// readEnvelope reads payload as json.Unmarshal into an Event would; ok is
// false when it is not in the canonical form, and the caller must decode
// with encoding/json. The event's Data is a copy, unless owned: then it
// is payload's own bytes (the caller never changes them).
func readEnvelope(payload []byte, owned bool) (e Event, ok bool) {
	s := strictReader{b: payload}
	s.lit(`{"id":`)
	if id := s.str(); !s.bad && e.ID.UnmarshalText(id) != nil {
		s.fail()
	}
	s.lit(`,"type":`)
	e.Type = knownType(s.str())
	s.lit(`,"version":`)
	e.Version = s.int()
	s.lit(`,"time":`)
	e.Time = s.time()
	s.lit(`,"keys":{`)
	first := true
	for _, k := range [...]struct {
		name string
		to   *string
	}{{`"namespace":`, &e.Keys.Namespace}, {`"name":`, &e.Keys.Name}, {`"device":`, &e.Keys.Device}} {
		sep := ","
		if first {
			sep = ""
		}
		if s.opt(sep + k.name) {
			*k.to = string(s.str())
			first = false
		}
	}
	s.lit(`}`)
	if s.opt(`,"correlation":{"deploymentUid":`) {
		c := &Correlation{DeploymentUID: string(s.str())}
		s.lit(`,"generation":`)
		c.Generation = s.int64()
		s.lit(`}`)
		e.Correlation = c
	}
	s.lit(`,"data":`)
	if s.bad || s.i >= len(s.b) || s.b[s.i] != '{' {
		return Event{}, false
	}
	start := s.i
	s.value(0)
	if s.bad {
		return Event{}, false
	}
	// json.RawMessage's UnmarshalJSON copies the value; a payload the
	// caller owns is not copied again.
	if owned {
		e.Data = s.b[start:s.i:s.i]
	} else {
		e.Data = bytes.Clone(s.b[start:s.i])
	}
	s.lit(`}`)
	if !s.end() {
		return Event{}, false
	}
	return e, true
}

// knownType returns the catalogue's Type for b without allocating, or a
// new one for a type the catalogue does not list.
func knownType(b []byte) Type {
	for _, ti := range catalogue {
		if string(ti.Type) == string(b) {
			return ti.Type
		}
	}
	return Type(b)
}

// unmarshalEnvelope decodes payload into an Event: the strict reader when
// the payload is canonical, else encoding/json.
func unmarshalEnvelope(payload []byte) (Event, error) {
	if e, ok := readEnvelope(payload, false); ok {
		return e, nil
	}
	var e Event
	err := json.Unmarshal(payload, &e)
	return e, err
}

// unmarshalOwnedEnvelope is unmarshalEnvelope of a payload the caller
// owns and never changes: the event's Data is payload's own bytes.
func unmarshalOwnedEnvelope(payload []byte) (Event, error) {
	if e, ok := readEnvelope(payload, true); ok {
		return e, nil
	}
	var e Event
	err := json.Unmarshal(payload, &e)
	return e, err
}
