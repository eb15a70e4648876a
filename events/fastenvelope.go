package events

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// A strict reader of the envelopes encoding/json writes (json.Marshal of
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
// with encoding/json.
func readEnvelope(payload []byte) (e Event, ok bool) {
	s := envReader{b: payload}
	s.lit(`{"id":`)
	if id := s.str(); !s.bad && e.ID.UnmarshalText(id) != nil {
		s.fail()
	}
	s.lit(`,"type":`)
	e.Type = knownType(s.str())
	s.lit(`,"version":`)
	e.Version = s.int()
	s.lit(`,"time":`)
	if q := s.quoted(); !s.bad && e.Time.UnmarshalJSON(q) != nil {
		s.fail()
	}
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
	// json.RawMessage's UnmarshalJSON copies the value.
	e.Data = bytes.Clone(s.b[start:s.i])
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

// maxFastDepth bounds the nesting the reader follows in data; deeper data
// is left to encoding/json (whose own bound is 10,000).
const maxFastDepth = 64

// envReader reads b from i; bad turns true at the first byte it does not
// expect, and every read after that is a no-op.
type envReader struct {
	b   []byte
	i   int
	bad bool
}

func (s *envReader) fail() { s.bad = true }

// end reports whether the whole input was read without a surprise.
func (s *envReader) end() bool { return !s.bad && s.i == len(s.b) }

// lit reads the literal l.
func (s *envReader) lit(l string) {
	if !s.opt(l) {
		s.fail()
	}
}

// opt reads the literal l if it comes next, and reports whether it did.
func (s *envReader) opt(l string) bool {
	if s.bad || len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// quoted reads a string of plain printable ASCII (no escape, no quote, no
// control or non-ASCII byte) and returns it with its quotes.
func (s *envReader) quoted() []byte {
	if s.bad || s.i >= len(s.b) || s.b[s.i] != '"' {
		s.fail()
		return nil
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			out := s.b[s.i : j+1]
			s.i = j + 1
			return out
		case c < 0x20 || c > 0x7e || c == '\\':
			s.fail()
			return nil
		}
	}
	s.fail()
	return nil
}

// str reads a string as quoted does and returns it without its quotes.
func (s *envReader) str() []byte {
	q := s.quoted()
	if len(q) < 2 {
		return nil
	}
	return q[1 : len(q)-1]
}

// integer reads an integer as JSON writes it: -?(0|[1-9][0-9]*).
func (s *envReader) integer() []byte {
	if s.bad {
		return nil
	}
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	start := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == start || (s.b[start] == '0' && j-start > 1) {
		s.fail()
		return nil
	}
	out := s.b[s.i:j]
	s.i = j
	return out
}

// int64 reads an integer into an int64 as encoding/json does (one out of
// range is left to it).
func (s *envReader) int64() int64 {
	n, err := strconv.ParseInt(string(s.integer()), 10, 64)
	if err != nil {
		s.fail()
	}
	return n
}

// int reads an integer into an int as encoding/json does.
func (s *envReader) int() int {
	n, err := strconv.ParseInt(string(s.integer()), 10, strconv.IntSize)
	if err != nil {
		s.fail()
	}
	return int(n)
}

// ws skips JSON whitespace.
func (s *envReader) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value checks one JSON value of data (whitespace allowed within it, as
// JSON allows) and moves past it. It accepts a subset of JSON (strings
// without escapes or control bytes; nesting up to maxFastDepth); anything
// outside it makes it fail, and the caller leaves the whole payload to
// encoding/json.
func (s *envReader) value(depth int) {
	if s.bad || s.i >= len(s.b) || depth > maxFastDepth {
		s.fail()
		return
	}
	switch c := s.b[s.i]; {
	case c == '{':
		s.i++
		s.ws()
		if s.opt(`}`) {
			return
		}
		for !s.bad {
			s.dataString()
			s.ws()
			s.lit(`:`)
			s.ws()
			s.value(depth + 1)
			s.ws()
			if s.opt(`}`) {
				return
			}
			s.lit(`,`)
			s.ws()
		}
	case c == '[':
		s.i++
		s.ws()
		if s.opt(`]`) {
			return
		}
		for !s.bad {
			s.value(depth + 1)
			s.ws()
			if s.opt(`]`) {
				return
			}
			s.lit(`,`)
			s.ws()
		}
	case c == '"':
		s.dataString()
	case c == '-' || (c >= '0' && c <= '9'):
		s.number()
	default:
		if !s.opt(`true`) && !s.opt(`false`) && !s.opt(`null`) {
			s.fail()
		}
	}
}

// dataString checks a string of data: any byte but a quote, a backslash
// and a control byte (encoding/json's scanner takes any other byte,
// non-ASCII and invalid UTF-8 included, and json.RawMessage keeps the
// bytes as they are); an escape makes it fail.
func (s *envReader) dataString() {
	if s.bad || s.i >= len(s.b) || s.b[s.i] != '"' {
		s.fail()
		return
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return
		case c < 0x20 || c == '\\':
			s.fail()
			return
		}
	}
	s.fail()
}

// number checks a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *envReader) number() {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	s.opt(`-`)
	switch {
	case s.opt(`0`):
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		digits()
	default:
		s.fail()
		return
	}
	if s.opt(`.`) && digits() == 0 {
		s.fail()
		return
	}
	if s.opt(`e`) || s.opt(`E`) {
		if !s.opt(`+`) {
			s.opt(`-`)
		}
		if digits() == 0 {
			s.fail()
		}
	}
}

// unmarshalEnvelope decodes payload into an Event: the strict reader when
// the payload is canonical, else encoding/json.
func unmarshalEnvelope(payload []byte) (Event, error) {
	if e, ok := readEnvelope(payload); ok {
		return e, nil
	}
	var e Event
	err := json.Unmarshal(payload, &e)
	return e, err
}
