package history

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// simulationRecords reads what a simulation learns from: every Deployment's
// intent and rollout transitions, every workload and fetch report and the
// devices' inventories (their time zones), stored up to until (zero: all), in
// stored order.
func (h *History) simulationRecords(ctx context.Context, until time.Time) ([]events.Record, error) {
	return h.collect(ctx, until,
		read{filter: filterDeploymentIntent, from: events.FromStart()},
		read{filter: filterRollouts, from: events.FromStart()},
		read{filter: filterWorkload, from: events.FromStart()},
		read{filter: filterInventory, from: events.FromStart()},
		read{filter: filterFetch, from: events.FromStart()})
}

// filterFetch is every device's fetch-ahead reports (stream FLEET_REPORTS,
// ADR 0027).
const filterFetch = "fleet.report.*.fetch"

// newLearner is a learner that warns of an inventory's ignored time zone
// on h's logger.
func (h *History) newLearner(ctx context.Context) *learner {
	l := newLearner()
	l.badZone = func(rec events.Record, err error) {
		h.log.WarnContext(ctx, "a device's reported time zone is ignored", "device", rec.Event.Keys.Device,
			"stream", rec.Stream, "sequence", rec.Sequence, "error", err)
	}
	return l
}

// Simulate predicts the rollout of rev, a revision of namespace/name (its
// frozen targets, canaries and plan), against the behaviour the fleet's
// devices showed in the history stored between from and to (zero: from
// the first record, to the last). o.Start defaults to to, else the last
// record's time.
func (h *History) Simulate(ctx context.Context, namespace, name string, rev events.DeploymentRevisionCreated, from, to time.Time, o SimulateOptions) (*Prediction, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	recs, err := h.simulationRecords(ctx, to)
	if err != nil {
		return nil, err
	}
	l := h.newLearner(ctx)
	for _, rec := range recs {
		l.add(rec)
	}
	m := l.m
	if !from.IsZero() {
		m.since(from)
	}
	return h.simulateWith(namespace, name, rev, m, recs, to, o)
}

func (h *History) simulateWith(namespace, name string, rev events.DeploymentRevisionCreated, m *simModel, recs []events.Record, to time.Time, o SimulateOptions) (*Prediction, error) {
	if o.Start.IsZero() {
		o.Start = to
		if o.Start.IsZero() && len(recs) > 0 {
			o.Start = recs[len(recs)-1].Stored
		}
		if o.Start.IsZero() {
			o.Start = time.Now()
		}
	}
	return simulateRevision(namespace, name, rev, m, o)
}

// since drops the samples of revisions handed before from.
func (m *simModel) since(from time.Time) {
	keep := func(xs []simSample) []simSample {
		return slices.DeleteFunc(xs, func(x simSample) bool { return x.handed.Before(from) })
	}
	m.all = keep(m.all)
	keepFetch := func(xs []simFetch) []simFetch {
		return slices.DeleteFunc(xs, func(x simFetch) bool { return x.at.Before(from) })
	}
	m.fetchesAll = keepFetch(m.fetchesAll)
	for d, xs := range m.fetches {
		if xs = keepFetch(xs); len(xs) == 0 {
			delete(m.fetches, d)
		} else {
			m.fetches[d] = xs
		}
	}
	for d, xs := range m.byDevice {
		if xs = keep(xs); len(xs) == 0 {
			delete(m.byDevice, d)
		} else {
			m.byDevice[d] = xs
		}
	}
}

// SimValidation compares simulations of a Deployment's recorded rollouts,
// each run with its own plan against the history stored before its
// revision, with what really happened.
type SimValidation struct {
	Deployment string `json:"deployment"`
	Seed       uint64 `json:"seed"`
	// Revisions are the recorded revisions, in order.
	Revisions []SimComparison `json:"revisions"`
	// Compared counts the stage marks (a stage's start or end) both the
	// record and the prediction have; Missing those only one has.
	Compared int `json:"compared"`
	Missing  int `json:"missing"`
	// MeanAbsError and MaxAbsError are over the compared marks' offsets
	// from the revision's creation.
	MeanAbsError time.Duration `json:"meanAbsErrorNs"`
	MaxAbsError  time.Duration `json:"maxAbsErrorNs"`
	// EndsAgree counts the revisions whose predicted end (Succeeded,
	// Failed, …) is the recorded one.
	EndsAgree int `json:"endsAgree"`
	// NoHistory counts the revisions simulated without a single recorded
	// sample before them (every device converges in DefaultSimConverge):
	// listed, but left out of Compared, Missing, the errors and EndsAgree.
	NoHistory int `json:"noHistory"`
}

// SimComparison is one recorded revision against its simulation.
type SimComparison struct {
	Generation   int64     `json:"generation"`
	RevisionID   string    `json:"revisionId"`
	Created      time.Time `json:"created"`
	RecordedEnd  string    `json:"recordedEnd"`
	PredictedEnd string    `json:"predictedEnd"`
	Marks        []SimMark `json:"marks"`
	// NoHistory is set when nothing was recorded before the revision to
	// learn from.
	NoHistory  bool       `json:"noHistory,omitempty"`
	Prediction Prediction `json:"prediction"`
}

// SimMark is one stage's start or end: recorded and predicted offsets from
// the revision's creation (negative: did not happen).
type SimMark struct {
	Stage     string        `json:"stage"`
	Mark      string        `json:"mark"`
	Recorded  time.Duration `json:"recordedNs"`
	Predicted time.Duration `json:"predictedNs"`
	// Error is Predicted minus Recorded when both happened.
	Error time.Duration `json:"errorNs"`
}

// SimulateRecorded simulates every recorded revision of namespace/name with
// its own frozen plan, against the history stored before the revision,
// with the recorded approvals' delays, and compares the predicted stage
// times with the recorded ones.
func (h *History) SimulateRecorded(ctx context.Context, namespace, name string, o SimulateOptions) (*SimValidation, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	recs, err := h.simulationRecords(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	out := &SimValidation{Deployment: namespace + "/" + name, Seed: o.Seed}
	// The Deployment's rollout transitions, by revision: each revision's
	// are read once, not once per revision (a long history has thousands).
	transitions := map[revKey][]events.Record{}
	for _, rec := range recs {
		if rec.Stream == events.StreamRollout && rec.Event.Keys.Namespace == namespace && rec.Event.Keys.Name == name {
			if d, err := events.Decode[events.RolloutTransition](rec.Event); err == nil {
				k := revKeyOf(d.UID, d.Generation)
				transitions[k] = append(transitions[k], rec)
			}
		}
	}
	// One pass: each revision of the Deployment is simulated with what the
	// learner folded of the records stored before it. A device that
	// reported no time zone before a revision reads its window in the
	// first it reported later (telemetry keeps only the last few
	// inventories, so an old rollout has none before it).
	first := newLearner()
	for _, rec := range recs {
		if rec.Event.Type == events.TypeDeviceInventory {
			first.inventory(rec)
		}
	}
	l := h.newLearner(ctx)
	l.m.laterZones = first.m.laterZones
	var chunks events.RevisionAssembler
	var total time.Duration
	for _, rec := range recs {
		ev, ok := events.Event{}, false
		if rec.Stream == events.StreamIntent && rec.Event.Keys.Namespace == namespace && rec.Event.Keys.Name == name {
			var err error
			ev, ok, err = chunks.Add(rec.Event)
			ok = ok && err == nil && ev.Type == events.TypeDeploymentRevisionCreated
		}
		if !ok {
			l.add(rec)
			continue
		}
		rev, err := events.Decode[events.DeploymentRevisionCreated](ev)
		if err != nil {
			l.add(rec)
			continue
		}
		recorded, delays := recordedStages(ev.Time, transitions[revKeyOf(rev.UID, rev.Generation)], rev)
		so := o
		so.Start, so.ApprovalDelays = ev.Time, delays
		p, err := simulateRevision(namespace, name, rev, l.m, so)
		l.add(rec)
		if err != nil {
			return nil, err
		}
		c := SimComparison{Generation: rev.Generation, RevisionID: rev.RevisionID, Created: ev.Time.UTC(), RecordedEnd: recorded.end,
			PredictedEnd: p.End, Prediction: *p, NoHistory: p.Model.Samples == 0}
		if c.NoHistory {
			out.NoHistory++
		} else if c.RecordedEnd == c.PredictedEnd {
			out.EndsAgree++
		}
		predicted := marksOf(p.Stages, p.Start)
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range unionKeys(recorded.marks, predicted) {
				if !yield(k) {
					return
				}
			}
		}) {
			stage, mark, _ := strings.Cut(k, "|")
			r, rok := recorded.marks[k]
			q, qok := predicted[k]
			m := SimMark{Stage: stage, Mark: mark, Recorded: -1, Predicted: -1}
			if rok {
				m.Recorded = r
			}
			if qok {
				m.Predicted = q
			}
			switch {
			case c.NoHistory:
				if rok && qok {
					m.Error = q - r
				}
			case rok && qok:
				m.Error = q - r
				out.Compared++
				total += abs(m.Error)
				out.MaxAbsError = max(out.MaxAbsError, abs(m.Error))
			default:
				out.Missing++
			}
			c.Marks = append(c.Marks, m)
		}
		slices.SortStableFunc(c.Marks, func(a, b SimMark) int { return compareMark(a, b) })
		out.Revisions = append(out.Revisions, c)
	}
	if len(out.Revisions) == 0 {
		return nil, fmt.Errorf("%w: Deployment %s/%s has no recorded revision (%w)", ErrNothingToSimulate, namespace, name, ErrNoEvents)
	}
	if out.Compared > 0 {
		out.MeanAbsError = total / time.Duration(out.Compared)
	}
	return out, nil
}

func unionKeys(a, b map[string]time.Duration) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// compareMark orders marks by the earliest offset either side has.
func compareMark(a, b SimMark) int {
	at := func(m SimMark) time.Duration {
		if m.Recorded >= 0 {
			return m.Recorded
		}
		return m.Predicted
	}
	return int(at(a) - at(b))
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// marksOf turns stages into "stage|start" and "stage|end" offsets from
// start.
func marksOf(stages []SimStage, start time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, g := range stages {
		if !g.Start.IsZero() {
			out[g.Name+"|start"] = g.Start.Sub(start)
		}
		if !g.End.IsZero() {
			out[g.Name+"|end "+g.Outcome] = g.End.Sub(start)
		}
	}
	return out
}

// recorded is a recorded rollout's stage marks and end.
type recorded struct {
	marks map[string]time.Duration
	end   string
}

// recordedStages reads the recorded transitions of rev among the
// Deployment's (start is its revision event's time): the stage marks, how
// it ended (Succeeded, Failed, Paused, AwaitingApproval or Waiting, as a
// simulation says it), and each batch's approval delay.
func recordedStages(start time.Time, transitions []events.Record, rev events.DeploymentRevisionCreated) (recorded, map[int]time.Duration) {
	out := recorded{marks: map[string]time.Duration{}, end: "Waiting"}
	var stages []SimStage
	awaiting := map[int]time.Time{}
	delays := map[int]time.Duration{}
	paused := false
	for _, rec := range transitions {
		ev := rec.Event
		d, err := events.Decode[events.RolloutTransition](ev)
		if err != nil || d.UID != rev.UID || d.Generation != rev.Generation {
			continue
		}
		s := simulation{pred: &Prediction{Stages: stages}}
		s.stage(SimStep{Time: ev.Time, Type: ev.Type, Batch: d.Batch})
		stages = s.pred.Stages
		switch ev.Type {
		case events.TypeRolloutSucceeded:
			out.end = "Succeeded"
		case events.TypeRolloutFailed:
			out.end = "Failed"
		case events.TypeRolloutAwaitingApproval:
			awaiting[d.Batch] = ev.Time
		case events.TypeRolloutApproved:
			if t, ok := awaiting[d.Batch]; ok {
				delays[d.Batch] = max(ev.Time.Sub(t), 0)
			} else {
				delays[d.Batch] = 0
			}
		case events.TypeRolloutPaused:
			paused = true
		case events.TypeRolloutResumed:
			paused = false
		}
	}
	if out.end == "Waiting" {
		switch {
		case paused:
			out.end = "Paused"
		case len(awaiting) > len(delays):
			out.end = "AwaitingApproval"
		}
	}
	for b := range awaiting {
		if _, ok := delays[b]; !ok {
			delays[b] = -1 // never approved
		}
	}
	stages = slices.DeleteFunc(stages, func(g SimStage) bool { return g.Start.IsZero() && g.Name == "release" })
	out.marks = marksOf(stages, start)
	return out, delays
}

func durText(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func (p *Prediction) writeText(w io.Writer) error {
	line(w, "Simulated rollout of %s (seed %d): %d targets, %d canaries, starting %s", p.Deployment, p.Seed, p.Targets, p.Canaries, timeText(p.Start))
	line(w, "ends %s after %s: %d handed the revision, %d succeeded, %d failed", p.End, durText(p.EndAt.Sub(p.Start)), p.Handed, p.Succeeded, p.Failed)
	line(w, "behaviour drawn from %d recorded samples: %d targets from their own, %d from their group's, %d from the fleet's, %d with none (converge in %s)",
		p.Model.Samples, p.Model.Own, p.Model.Group, p.Model.Fleet, p.Model.Default, DefaultSimConverge)
	if z := p.TimeZones; z != nil {
		ignored := ""
		if z.Invalid > 0 {
			ignored = fmt.Sprintf("; %d reported time zones ignored (not an IANA name of the tz database)", z.Invalid)
		}
		line(w, "time zones: %d targets read in the zone they reported, %d in UTC (none reported)%s", z.Reported, z.None, ignored)
	}
	if f := p.Fetch; f != nil {
		window := ""
		if f.Window != nil {
			window = fmt.Sprintf(" (fetch window %s)", f.Window)
		}
		fetches := ""
		if !f.FirstStart.IsZero() {
			fetches = fmt.Sprintf("; fetches from +%s to +%s", durText(f.FirstStart.Sub(p.Start)), durText(f.LastEnd.Sub(p.Start)))
		}
		line(w, "prefetch%s: %d targets fetched before they could switch, %d still fetching then, %d pulled while switching, %d without a recorded fetch%s",
			window, f.Fetched, f.Joined, f.Unfetched, f.NoHistory, fetches)
	}
	for _, a := range p.Assumptions {
		line(w, "assumes: %s", a)
	}
	for _, t := range p.DeadlineExceeded {
		line(w, "progress deadline exceeded at +%s", durText(t.Sub(p.Start)))
	}
	fmt.Fprintln(w, "\nSTAGES")
	t := newTable(w, "STAGE", "START", "END", "OUTCOME")
	for _, g := range p.Stages {
		end := time.Duration(-1)
		if !g.End.IsZero() {
			end = g.End.Sub(p.Start)
		}
		t.row(g.Name, "+"+durText(g.Start.Sub(p.Start)), "+"+durText(end), dash(g.Outcome))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nTIMELINE")
	t = newTable(w, "AT", "TYPE", "BATCH", "HANDED", "COUNTS", "DETAIL")
	for _, s := range p.Steps {
		batch := "-"
		if s.Batch > 0 {
			batch = fmt.Sprint(s.Batch)
		}
		c := s.Counts
		detail := s.Device
		if s.Error != "" {
			detail = strings.TrimSpace(detail + " " + s.Error)
		}
		if s.WindowWaiting > 0 {
			detail = strings.TrimSpace(fmt.Sprintf("%s %d targets wait for the maintenance window (%s), the earliest opens at +%s (%s)",
				detail, s.WindowWaiting, p.Window, durText(s.WindowOpens.Sub(p.Start)), s.WindowOpens.UTC().Format(time.RFC3339)))
		}
		t.row("+"+durText(s.Offset), string(s.Type), batch, fmt.Sprint(s.Handed),
			fmt.Sprintf("%d/%d succeeded, %d failed", c.Succeeded, c.Total, c.Failed), dash(detail))
	}
	return t.flush()
}

func (v *SimValidation) writeText(w io.Writer) error {
	line(w, "Recorded rollouts of %s simulated with their own plans against the history before each (seed %d)", v.Deployment, v.Seed)
	line(w, "%d stage marks compared: mean absolute error %s, max %s; %d marks on one side only; %d of %d ends agree (%d revisions without any history before them left out)",
		v.Compared, durText(v.MeanAbsError), durText(v.MaxAbsError), v.Missing, v.EndsAgree, len(v.Revisions)-v.NoHistory, v.NoHistory)
	fmt.Fprintln(w)
	t := newTable(w, "GEN", "REVISION", "STAGE", "MARK", "RECORDED", "PREDICTED", "ERROR")
	for _, c := range v.Revisions {
		note := ""
		if c.NoHistory {
			note = "no history before it"
		}
		t.row(fmt.Sprint(c.Generation), c.RevisionID, "(end)", "", c.RecordedEnd, c.PredictedEnd, note)
		for _, m := range c.Marks {
			e := "-"
			if m.Recorded >= 0 && m.Predicted >= 0 {
				e = m.Error.Round(time.Millisecond).String()
			}
			t.row(fmt.Sprint(c.Generation), c.RevisionID, m.Stage, m.Mark, "+"+durText(m.Recorded), "+"+durText(m.Predicted), e)
		}
	}
	return t.flush()
}
