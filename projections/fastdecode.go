package projections

import (
	"strconv"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// A strict reader of the JSON encoding/json writes for the data the folds
// read most, workload reports and rollout transitions: the fields in the
// struct's order, no whitespace, strings of plain ASCII without escapes.
// Anything else (another order, another or a repeated field, whitespace, an
// escape, a number out of range, a null) makes it give up, and the caller
// decodes with events.Decode. So what it accepts it reads exactly as
// encoding/json does, and everything else, hostile data included, gets
// encoding/json's answer (FuzzFastDecode compares the two).

// decodeReport is events.Decode[events.WorkloadStatus], read by the strict
// reader when the data is in canonical form.
func decodeReport(ev events.Event) (events.WorkloadStatus, error) {
	if ev.Type == events.TypeWorkloadStatus && known(ev) {
		if d, ok := readReport(ev.Data); ok {
			return d, nil
		}
	}
	return events.Decode[events.WorkloadStatus](ev)
}

// decodeTransition is events.Decode[events.RolloutTransition], read by the
// strict reader when the data is in canonical form.
func decodeTransition(ev events.Event) (events.RolloutTransition, error) {
	if info, ok := ev.Type.Info(); ok && info.Family == events.FamilyDeploymentRollout && ev.Version <= info.Version {
		if d, ok := readTransition(ev.Data); ok {
			return events.NewRolloutTransition(ev.Type, d), nil
		}
	}
	return events.Decode[events.RolloutTransition](ev)
}

// known reports whether ev's schema version is one this build knows (else
// events.Decode refuses it).
func known(ev events.Event) bool {
	info, ok := ev.Type.Info()
	return ok && ev.Version <= info.Version
}

func readReport(b []byte) (events.WorkloadStatus, bool) {
	var d events.WorkloadStatus
	s := reader{b: b}
	s.lit(`{"namespace":`)
	d.Namespace = s.str()
	s.lit(`,"deployment":`)
	d.Deployment = s.str()
	s.lit(`,"uid":`)
	d.UID = s.str()
	s.lit(`,"generation":`)
	d.Generation = s.int64()
	s.lit(`,"revisionId":`)
	d.RevisionID = s.str()
	s.lit(`,"phase":`)
	d.Phase = s.phase()
	if s.opt(`,"error":`) {
		d.Error = s.str()
	}
	s.lit(`,"since":`)
	d.Since = s.time()
	if s.opt(`,"windowOpens":`) {
		opens := s.time()
		d.WindowOpens = &opens
	}
	s.lit(`}`)
	return d, s.end()
}

func readTransition(b []byte) (events.RolloutTransition, bool) {
	var d events.RolloutTransition
	s := reader{b: b}
	s.lit(`{"uid":`)
	d.UID = s.str()
	s.lit(`,"generation":`)
	d.Generation = s.int64()
	s.lit(`,"revisionId":`)
	d.RevisionID = s.str()
	s.lit(`,"counts":{"total":`)
	d.Counts.Total = s.int()
	s.lit(`,"succeeded":`)
	d.Counts.Succeeded = s.int()
	s.lit(`,"pending":`)
	d.Counts.Pending = s.int()
	s.lit(`,"failed":`)
	d.Counts.Failed = s.int()
	s.lit(`,"canaries":`)
	d.Counts.Canaries = s.int()
	s.lit(`,"canariesSucceeded":`)
	d.Counts.CanariesSucceeded = s.int()
	s.lit(`,"canariesFailed":`)
	d.Counts.CanariesFailed = s.int()
	s.lit(`}`)
	if s.opt(`,"device":`) {
		d.Device = s.str()
	}
	if s.opt(`,"error":`) {
		d.Error = s.str()
	}
	if s.opt(`,"released":[`) {
		d.Released = []string{} // [] decodes to an empty list, not nil
		for !s.opt(`]`) {
			if len(d.Released) > 0 {
				s.lit(`,`)
			}
			d.Released = append(d.Released, s.str())
			if s.bad {
				break
			}
		}
	}
	s.lit(`}`)
	return d, s.end()
}

// reader reads b from i; bad turns true at the first byte it does not
// expect, and every read after that is a no-op.
type reader struct {
	b   []byte
	i   int
	bad bool // an unexpected byte was met
}

func (s *reader) fail() { s.bad = true }

// end reports whether the whole input was read without a surprise.
func (s *reader) end() bool { return !s.bad && s.i == len(s.b) }

// lit reads the literal l.
func (s *reader) lit(l string) {
	if s.bad || len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		s.fail()
		return
	}
	s.i += len(l)
}

// opt reads the literal l if it comes next, and reports whether it did.
func (s *reader) opt(l string) bool {
	if s.bad || len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// raw reads a string of plain printable ASCII (no escape, no quote) and
// returns it with its quotes.
func (s *reader) raw() []byte {
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

func (s *reader) str() string {
	q := s.raw()
	if len(q) < 2 {
		return ""
	}
	return string(q[1 : len(q)-1])
}

// phase reads a workload phase; the known ones are not allocated again.
func (s *reader) phase() events.WorkloadPhase {
	q := s.raw()
	if len(q) < 2 {
		return ""
	}
	for _, p := range knownPhases {
		if string(q[1:len(q)-1]) == string(p) {
			return p
		}
	}
	return events.WorkloadPhase(q[1 : len(q)-1])
}

var knownPhases = [...]events.WorkloadPhase{events.WorkloadConverged, events.WorkloadFailed, events.WorkloadPending,
	events.WorkloadApplying, events.WorkloadRemoved}

// number reads an integer as JSON writes it: -?(0|[1-9][0-9]*).
func (s *reader) number() []byte {
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

func (s *reader) int64() int64 {
	n, err := strconv.ParseInt(string(s.number()), 10, 64)
	if err != nil {
		s.fail()
	}
	return n
}

func (s *reader) int() int {
	n, err := strconv.ParseInt(string(s.number()), 10, strconv.IntSize)
	if err != nil {
		s.fail()
	}
	return int(n)
}

// time reads a time as encoding/json does: time.Time's UnmarshalJSON of
// the quoted string.
func (s *reader) time() time.Time {
	var t time.Time
	q := s.raw()
	if s.bad {
		return t
	}
	if err := t.UnmarshalJSON(q); err != nil {
		s.fail()
	}
	return t
}
