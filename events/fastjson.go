package events

import (
	"strconv"
	"time"
)

// The strict reader: one scanner of the JSON encoding/json writes, shared
// by the readers of the envelope (fastenvelope.go) and of the data the
// folds read most (fastdata.go). Each reader spells out the canonical form
// it accepts, literal by literal; the scanner reads it byte by byte, once,
// without reflection, and turns bad at the first byte it does not expect.
// A reader that ends bad gives up and its caller decodes with
// encoding/json, so the strict reader only ever decides how fast a record
// is read, never what it says: hostile bytes (a device's report) get
// encoding/json's answer.

// maxFastDepth bounds the nesting the reader follows in data; deeper data
// is left to encoding/json (whose own bound is 10,000).
const maxFastDepth = 64

// strictReader reads b from i; bad turns true at the first byte it does not
// expect, and every read after that is a no-op.
type strictReader struct {
	b   []byte
	i   int
	bad bool
}

func (s *strictReader) fail() { s.bad = true }

// end reports whether the whole input was read without a surprise.
func (s *strictReader) end() bool { return !s.bad && s.i == len(s.b) }

// lit reads the literal l.
func (s *strictReader) lit(l string) {
	if !s.opt(l) {
		s.fail()
	}
}

// opt reads the literal l if it comes next, and reports whether it did.
func (s *strictReader) opt(l string) bool {
	if s.bad || len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// quoted reads a string of plain printable ASCII (no escape, no quote, no
// control or non-ASCII byte: encoding/json reads such a string as its
// bytes) and returns it with its quotes.
func (s *strictReader) quoted() []byte {
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
func (s *strictReader) str() []byte {
	q := s.quoted()
	if len(q) < 2 {
		return nil
	}
	return q[1 : len(q)-1]
}

// text reads a string as quoted does, as a Go string.
func (s *strictReader) text() string {
	return string(s.str())
}

// time reads a time as encoding/json does: time.Time's UnmarshalJSON of
// the quoted string.
func (s *strictReader) time() time.Time {
	var t time.Time
	if q := s.quoted(); !s.bad && t.UnmarshalJSON(q) != nil {
		s.fail()
	}
	return t
}

// integer reads an integer as JSON writes it: -?(0|[1-9][0-9]*).
func (s *strictReader) integer() []byte {
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
func (s *strictReader) int64() int64 {
	n, err := strconv.ParseInt(string(s.integer()), 10, 64)
	if err != nil {
		s.fail()
	}
	return n
}

// int reads an integer into an int as encoding/json does.
func (s *strictReader) int() int {
	n, err := strconv.ParseInt(string(s.integer()), 10, strconv.IntSize)
	if err != nil {
		s.fail()
	}
	return int(n)
}

// ws skips JSON whitespace.
func (s *strictReader) ws() {
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
func (s *strictReader) value(depth int) {
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
func (s *strictReader) dataString() {
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
func (s *strictReader) number() {
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
