package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is what a fault kills.
type Kind string

// The kinds of fault a chaos run injects; each is a SIGKILL of one process.
const (
	KindNATS     Kind = "nats-server"
	KindOperator Kind = "operator"
	KindCallout  Kind = "callout"
	KindAgent    Kind = "agent"
)

// Fault is one SIGKILL of a schedule: at At (from the run's start) the
// process Target (0-based, of its kind) is killed, and Down later it is
// started again.
type Fault struct {
	At     time.Duration
	Kind   Kind
	Target int
	Down   time.Duration
}

// String is the fault on one line.
func (f Fault) String() string {
	return fmt.Sprintf("+%-8s SIGKILL %s #%d, restarted %s later", f.At.Round(100*time.Millisecond), f.Kind, f.Target+1, f.Down.Round(100*time.Millisecond))
}

// ScheduleOptions configure NewSchedule.
type ScheduleOptions struct {
	// Seed makes the schedule: one seed, one schedule.
	Seed uint64
	// Duration is the run's length: no fault starts after it.
	Duration time.Duration
	// Targets is how many processes of each kind may be killed; a kind
	// absent (or 0) is never chosen.
	Targets map[Kind]int
	// Gap bounds the time from one fault's restart to the next fault;
	// Down bounds how long a killed process stays down.
	MinGap, MaxGap   time.Duration
	MinDown, MaxDown time.Duration
}

// Validate checks the options.
func (o ScheduleOptions) Validate() error {
	var errs []error
	if o.Duration <= 0 {
		errs = append(errs, fmt.Errorf("chaos: schedule duration %s: give a positive duration", o.Duration))
	}
	n := 0
	for k, c := range o.Targets {
		if c < 0 {
			errs = append(errs, fmt.Errorf("chaos: %d targets of %s: must not be negative", c, k))
		}
		n += c
	}
	if n == 0 {
		errs = append(errs, errors.New("chaos: no targets: give at least one process of one kind"))
	}
	if o.MinGap <= 0 || o.MaxGap < o.MinGap {
		errs = append(errs, fmt.Errorf("chaos: gap %s..%s: want 0 < MinGap ≤ MaxGap", o.MinGap, o.MaxGap))
	}
	if o.MinDown <= 0 || o.MaxDown < o.MinDown {
		errs = append(errs, fmt.Errorf("chaos: down time %s..%s: want 0 < MinDown ≤ MaxDown", o.MinDown, o.MaxDown))
	}
	return errors.Join(errs...)
}

// NewSchedule returns the faults of a run, in time order: one process down
// at a time (a fault's restart comes before the next fault, so a
// three-server cluster never loses its quorum), kinds and targets chosen
// uniformly among the processes, gaps and down times uniform in their
// bounds.
func NewSchedule(o ScheduleOptions) ([]Fault, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	kinds := make([]Kind, 0, len(o.Targets))
	for k, c := range o.Targets {
		if c > 0 {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds) // map order must not change the schedule
	between := func(lo, hi time.Duration) time.Duration {
		if hi == lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	var out []Fault
	at := between(o.MinGap, o.MaxGap)
	for at < o.Duration {
		k := kinds[rng.IntN(len(kinds))]
		f := Fault{At: at, Kind: k, Target: rng.IntN(o.Targets[k]), Down: between(o.MinDown, o.MaxDown)}
		out = append(out, f)
		at += f.Down + between(o.MinGap, o.MaxGap)
	}
	return out, nil
}

// FormatSchedule is the schedule, one fault a line, headed by its seed.
func FormatSchedule(seed uint64, faults []Fault) string {
	var b strings.Builder
	fmt.Fprintf(&b, "fault schedule (seed %d, %d faults):\n", seed, len(faults))
	for _, f := range faults {
		b.WriteString("  " + f.String() + "\n")
	}
	return b.String()
}
