package history

import (
	"cmp"
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/score"
)

// The what-if simulator (ADR 0021): a revision's rollout plan replayed
// against the fleet's recorded behaviour. It never re-implements the plan:
// every decision is the rollout projection's own (projections.Rollout
// NextAt, the operator's state machine), fed with the transitions it
// decides and with device reports drawn from what each device did before.
// What it models is the environment: how long a device took from being
// handed a revision to its first Converged or Failed report, whether it
// failed or stayed silent, when an approval comes, when the operator's
// target timeout removes a silent device.

// Defaults of SimulateOptions.
const (
	// DefaultSimProgressDeadline is the operator's --progress-deadline
	// default.
	DefaultSimProgressDeadline = 10 * time.Minute
	// DefaultSimTargetTimeout is the operator's --target-timeout default.
	DefaultSimTargetTimeout = time.Hour
	// DefaultSimConverge is a device's time to converge when nothing in the
	// history says anything about any device.
	DefaultSimConverge = 30 * time.Second
	// maxSimSteps bounds a simulation's decisions.
	maxSimSteps = 1 << 20
)

// SimulateOptions configure one simulation.
type SimulateOptions struct {
	// Seed makes the draws reproducible: the same seed, plan and history
	// give the same prediction.
	Seed uint64
	// Start is when the simulated revision is created (zero: the end of
	// the history learned from).
	Start time.Time
	// ApprovalDelay is how long a manual approval takes once a batch
	// awaits it: 0 instant, a negative value never (the prediction halts
	// there).
	ApprovalDelay time.Duration
	// ApprovalDelays, when set, give the delay per batch (1-based) instead
	// of ApprovalDelay (a recorded rollout's own approvals).
	ApprovalDelays map[int]time.Duration
	// ProgressDeadline is the operator's default deadline when the plan
	// sets none (zero: DefaultSimProgressDeadline).
	ProgressDeadline time.Duration
	// TargetTimeout is when the operator removes a target handed the
	// revision without a result (zero: DefaultSimTargetTimeout).
	TargetTimeout time.Duration
}

// Validate checks the options.
func (o SimulateOptions) Validate() error {
	if o.ProgressDeadline < 0 || o.TargetTimeout < 0 {
		return fmt.Errorf("%w: --progress-deadline and --target-timeout must not be negative", ErrInvalidOptions)
	}
	return nil
}

// Prediction is a simulated rollout: every transition the plan would have
// taken and when, its stages, and where it ends or halts.
type Prediction struct {
	Deployment string `json:"deployment"`
	Generation int64  `json:"generation,omitempty"`
	RevisionID string `json:"revisionId,omitempty"`
	Seed       uint64 `json:"seed"`
	// Start is when the revision is created.
	Start time.Time `json:"start"`
	// Targets and Canaries count the frozen targets.
	Targets  int `json:"targets"`
	Canaries int `json:"canaries"`
	// Steps are the transitions, in order.
	Steps []SimStep `json:"steps"`
	// Stages are the canary stage, each batch (or the release) with when
	// it started and ended.
	Stages []SimStage `json:"stages"`
	// End is how the simulation ended: Succeeded, Failed, Paused (onFailure
	// Pause), AwaitingApproval (an approval that never comes) or Waiting
	// (devices that never answer and nothing else to happen).
	End string `json:"end"`
	// EndAt is when; Handed is how many targets had been handed the
	// revision by then, Succeeded and Failed their results.
	EndAt     time.Time `json:"endAt"`
	Handed    int       `json:"handed"`
	Succeeded int       `json:"succeeded"`
	Failed    int       `json:"failed"`
	// DeadlineExceeded lists when the progress deadline was exceeded.
	DeadlineExceeded []time.Time `json:"deadlineExceeded,omitempty"`
	// Model says where the devices' behaviour came from: how many
	// targets had samples of their own, of their group, of the fleet,
	// or none.
	Model SimModel `json:"model"`
	// Window is the revision's maintenance window (ADR 0029), nil when
	// it has none.
	Window *events.MaintenanceWindow `json:"window,omitempty"`
	// Assumptions are what the prediction assumed that the plan and the
	// history do not say (e.g. the time zone a maintenance window is read
	// in).
	Assumptions []string `json:"assumptions,omitempty"`
	// TimeZones, for a revision with a window, says in which zone the
	// targets' windows were read: each target's last reported one (its
	// inventory's timeZone), else UTC. Nil without a window.
	TimeZones *SimZones `json:"timeZones,omitempty"`
	// Fetch, for a revision with prefetch (ADR 0027), says how the
	// targets' fetches ahead went; nil without prefetch.
	Fetch *SimFetch `json:"fetch,omitempty"`
}

// SimFetch is what a prediction modelled of a revision's fetch ahead
// (spec.rollout.prefetch, ADR 0027) and fetch window (ADR 0029).
type SimFetch struct {
	// Window is the revision's fetch window, nil when it has none.
	Window *events.MaintenanceWindow `json:"window,omitempty"`
	// Fetched counts the targets whose fetch ended before they could
	// switch; Joined those still fetching then (the switch waits for the
	// fetch's end); Unfetched those that could switch before their fetch
	// started (its window had not opened) or whose drawn fetch failed:
	// they pull when they switch; NoHistory those without any recorded
	// fetch to draw from (nor their group or the fleet): their switch
	// includes the pull, as without prefetch.
	Fetched   int `json:"fetched"`
	Joined    int `json:"joined"`
	Unfetched int `json:"unfetched"`
	NoHistory int `json:"noHistory"`
	// Estimated counts the targets whose drawn convergence could not be
	// split by its own fetch report nor another of their recorded
	// switches: their switch is the convergence minus the drawn fetch.
	Estimated int `json:"estimated"`
	// FirstStart and LastEnd bound the simulated fetches.
	FirstStart time.Time `json:"firstStart,omitzero"`
	LastEnd    time.Time `json:"lastEnd,omitzero"`
}

// SimZones counts the time zones a prediction read the targets' windows
// in.
type SimZones struct {
	// Reported counts the targets read in the time zone they last
	// reported; None those that reported none, read in UTC.
	Reported int `json:"reported"`
	None     int `json:"none"`
	// Invalid counts the inventory reports learned from whose time zone
	// was ignored: not an IANA name the tz database holds (device input
	// is hostile, events.LoadTimeZone).
	Invalid int `json:"invalid,omitempty"`
}

// SimModel counts the sources of the targets' behaviour.
type SimModel struct {
	// Samples is how many handed-to-settled samples the history gave.
	Samples int `json:"samples"`
	// Own, Group, Fleet and Default count targets drawn from their own
	// samples, their budget group's, the whole fleet's, or the default
	// (no sample at all).
	Own     int `json:"own"`
	Group   int `json:"group"`
	Fleet   int `json:"fleet"`
	Default int `json:"default"`
}

// SimStep is one transition of a simulated rollout.
type SimStep struct {
	Time   time.Time            `json:"time"`
	Offset time.Duration        `json:"offsetNs"`
	Type   events.Type          `json:"type"`
	Batch  int                  `json:"batch,omitempty"`
	Handed int                  `json:"handed,omitempty"`
	Device string               `json:"device,omitempty"`
	Error  string               `json:"error,omitempty"`
	Counts events.RolloutCounts `json:"counts"`
	// WindowWaiting, after a step that hands the revision to targets
	// outside the revision's maintenance window (ADR 0029), is how many
	// targets then wait for it, and WindowOpens the earliest opening.
	WindowWaiting int       `json:"windowWaiting,omitempty"`
	WindowOpens   time.Time `json:"windowOpens,omitzero"`
}

// SimStage is one stage of a rollout: its start and end transitions'
// times (zero: never reached).
type SimStage struct {
	// Name is canary, batch N or release.
	Name  string    `json:"name"`
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	// Outcome is succeeded, failed or empty (did not end).
	Outcome string `json:"outcome,omitempty"`
}

// simSample is one device's recorded answer to a revision handed to it.
type simSample struct {
	images []string
	handed time.Time
	dur    time.Duration
	// outcome: Converged, Failed, or "" for silent (removed by the target
	// timeout without a result).
	outcome events.WorkloadPhase
	// split is set when the device fetched the revision ahead (a fetch
	// report, ADR 0027) and its convergence splits into the fetch (fetch,
	// the fetch report's end minus its start) and the switch (sw: dur
	// minus the part of the fetch after the device was handed the
	// revision).
	split     bool
	fetch, sw time.Duration
}

// full is the sample's time to converge with the pull in it: dur, or for
// a device that fetched ahead its switch plus its fetch.
func (x simSample) full() time.Duration {
	if x.split {
		return x.sw + x.fetch
	}
	return x.dur
}

// simFetch is one device's recorded fetch ahead of a revision: how long
// its images took (the fetch report's end minus its start, the device's
// clock) and when it was stored.
type simFetch struct {
	images []string
	dur    time.Duration
	at     time.Time
}

// maxSimFetch bounds a believed fetch duration: a report of a longer one
// (or a negative one) is device input that is left out.
const maxSimFetch = 7 * 24 * time.Hour

// simModel is the fleet's recorded behaviour.
type simModel struct {
	byDevice map[string][]simSample
	all      []simSample
	// zones are the devices' last valid reported time zones; laterZones,
	// the first each reported, stand in for a device that reported none
	// yet (a recorded rollout older than what telemetry keeps). badZones
	// counts the reports whose zone was ignored.
	zones, laterZones map[string]*time.Location
	badZones          int
	// fetches are the devices' recorded fetches ahead (ADR 0027).
	fetches    map[string][]simFetch
	fetchesAll []simFetch
}

func (m *simModel) add(device string, s simSample) {
	m.byDevice[device] = append(m.byDevice[device], s)
	m.all = append(m.all, s)
}

func (m *simModel) addFetch(device string, f simFetch) {
	if m.fetches == nil {
		m.fetches = map[string][]simFetch{}
	}
	m.fetches[device] = append(m.fetches[device], f)
	m.fetchesAll = append(m.fetchesAll, f)
}

// learner folds records (stored order) into a model: for every revision's
// target, the time from being handed the revision (the operator's
// canary-stage, batch-started or released; for a target that reported
// waiting for the revision's maintenance window, from the window's
// opening) to its first Converged or Failed
// report as the stream stored it, or its removal without a result. It keeps
// one rollout fold per Deployment and the samples, never the records.
type learner struct {
	m *simModel
	// badZone, when set, is told of an inventory's time zone that was
	// ignored.
	badZone  func(events.Record, error)
	rollouts map[events.Keys]*projections.Rollout
	images   map[revKey][]string
	chunks   events.RevisionAssembler
	// fetched is each revision's targets' first Fetched report: when it
	// was stored and the fetch's duration.
	fetched map[revKey]map[string]simFetch
}

func newLearner() *learner {
	return &learner{m: &simModel{byDevice: map[string][]simSample{}, zones: map[string]*time.Location{}}, rollouts: map[events.Keys]*projections.Rollout{}, images: map[revKey][]string{},
		fetched: map[revKey]map[string]simFetch{}}
}

// learn is a learner's model of recs.
func learn(recs []events.Record) *simModel {
	l := newLearner()
	for _, rec := range recs {
		l.add(rec)
	}
	return l.m
}

// add folds one record.
func (l *learner) add(rec events.Record) {
	m := l.m
	ev := rec.Event
	keys := events.Keys{Namespace: ev.Keys.Namespace, Name: ev.Keys.Name}
	switch {
	case ev.Type == events.TypeDeviceInventory:
		l.inventory(rec)
		return
	case ev.Type == events.TypeWorkloadFetch:
		l.fetch(rec)
		return
	case rec.Stream == events.StreamIntent:
		whole, ok, err := l.chunks.Add(ev)
		if err != nil || !ok {
			return
		}
		ev = whole
		if ev.Type == events.TypeDeploymentRevisionCreated {
			if d, err := events.Decode[events.DeploymentRevisionCreated](ev); err == nil {
				l.images[revKeyOf(d.UID, d.Generation)] = scoreImages(d.Score)
			}
		}
	case ev.Type == events.TypeWorkloadStatus:
		k, _, ok := workloadKey(rec)
		if !ok {
			return
		}
		keys = k
	}
	r := l.rollouts[keys]
	if r == nil {
		r = &projections.Rollout{}
		l.rollouts[keys] = r
	}
	p := projections.NewStoredPayload(events.Record{Event: ev, Stored: rec.Stored, Stream: rec.Stream, Sequence: rec.Sequence, Subject: rec.Subject})
	dev := ev.Keys.Device
	var before projections.DeviceResult
	var handed time.Time
	removed := ""
	// A target that waited for the revision's maintenance window (ADR
	// 0029) is timed from the opening, by the operator's own rule
	// (TargetTimeoutFrom): the wait is the plan's, not the device's
	// behaviour.
	if ev.Type == events.TypeWorkloadStatus {
		before, handed = r.Results[dev], r.TargetTimeoutFrom(dev)
	}
	if ev.Type == events.TypeRolloutTargetRemoved {
		if d, err := p.RolloutTransition(); err == nil && r.IsCurrent(d.UID, d.Generation) && r.IsTarget(d.Device) &&
			r.Results[d.Device].Settled.IsZero() && !r.HandedAt(d.Device).IsZero() {
			removed, handed = d.Device, r.TargetTimeoutFrom(d.Device)
		}
	}
	r.FoldPayload(&p)
	imgs := l.images[revKeyOf(r.UID, r.Generation)]
	switch {
	case removed != "":
		m.add(removed, simSample{images: imgs, handed: handed, dur: max(rec.Stored.Sub(handed), 0)})
	case ev.Type == events.TypeWorkloadStatus && before.Settled.IsZero() && !handed.IsZero():
		res := r.Results[dev]
		if !res.Settled.IsZero() && r.IsTarget(dev) {
			smp := simSample{images: imgs, handed: handed, dur: max(res.Settled.Sub(handed), 0), outcome: res.Phase}
			if f, ok := l.fetched[revKeyOf(r.UID, r.Generation)][dev]; ok {
				// The part of the fetch after the hand-over was waited
				// for by the switch.
				smp.split, smp.fetch = true, f.dur
				smp.sw = smp.dur - min(max(f.at.Sub(handed), 0), smp.dur)
			}
			m.add(dev, smp)
		}
	}
}

// fetch folds a device's fetch report (ADR 0027): the first Fetched
// report of a revision from one of its targets, with an end no earlier
// than its start and a duration within maxSimFetch, is a fetch sample;
// anything else (a report for a revision that does not target the device,
// a failed fetch, a hostile duration) is left out.
func (l *learner) fetch(rec events.Record) {
	d, err := events.Decode[events.WorkloadFetch](rec.Event)
	if err != nil || d.Phase != events.FetchDone || d.Ended == nil {
		return
	}
	dur := d.Ended.Sub(d.Started)
	if dur < 0 || dur > maxSimFetch {
		return
	}
	r := l.rollouts[events.Keys{Namespace: d.Namespace, Name: d.Deployment}]
	dev := rec.Event.Keys.Device
	if r == nil || !r.IsCurrent(d.UID, d.Generation) || !r.IsTarget(dev) {
		return
	}
	k := revKeyOf(d.UID, d.Generation)
	if _, ok := l.fetched[k][dev]; ok {
		return
	}
	if l.fetched[k] == nil {
		l.fetched[k] = map[string]simFetch{}
	}
	f := simFetch{images: l.images[k], dur: dur, at: rec.Stored}
	l.fetched[k][dev] = f
	l.m.addFetch(dev, f)
}

// inventory folds a device's inventory report: its time zone, when it
// reported one that events.LoadTimeZone loads, becomes the device's (the
// first also its stand-in for earlier rollouts); one it does not load is
// device input to ignore, counted and told to badZone. A report without a
// zone (an older agent) leaves the last one.
func (l *learner) inventory(rec events.Record) {
	inv, err := events.Decode[events.DeviceInventory](rec.Event)
	if err != nil || inv.TimeZone == "" {
		return
	}
	loc, err := events.LoadTimeZone(inv.TimeZone)
	if err != nil {
		l.m.badZones++
		if l.badZone != nil {
			l.badZone(rec, err)
		}
		return
	}
	dev := rec.Event.Keys.Device
	l.m.zones[dev] = loc
	if l.m.laterZones == nil {
		l.m.laterZones = map[string]*time.Location{}
	}
	if _, ok := l.m.laterZones[dev]; !ok {
		l.m.laterZones[dev] = loc
	}
}

// scoreImages lists the images of a score (sorted).
func scoreImages(raw json.RawMessage) []string {
	var sc score.Score
	if json.Unmarshal(raw, &sc) != nil {
		return nil
	}
	var out []string
	if c := sc.Data.InitContainer; c != nil {
		out = append(out, c.Image)
	}
	for _, s := range sc.Data.Services {
		out = append(out, s.Image)
	}
	return sortedSet(out)
}

// simEvent is something that happens at a time in a simulation.
type simEvent struct {
	at     time.Time
	order  int
	device string
	phase  events.WorkloadPhase // a report; "" with device: removal
	batch  int                  // an approval of this batch
	wake   bool                 // a soak's end
}

type simQueue []simEvent

func (q simQueue) Len() int { return len(q) }
func (q simQueue) Less(i, j int) bool {
	return cmp.Or(q[i].at.Compare(q[j].at), cmp.Compare(q[i].order, q[j].order)) < 0
}
func (q simQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)   { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// simulation is one run of the rollout state machine.
type simulation struct {
	o       SimulateOptions
	m       *simModel
	rev     events.DeploymentRevisionCreated
	images  []string
	keys    events.Keys
	r       projections.Rollout
	q       simQueue
	n       int
	handed  map[string]bool
	groupOf map[string]int
	pred    *Prediction
	asked   map[int]bool
	// from is when each handed target may switch (after its window);
	// fetches its simulated fetch ahead, for a revision with prefetch.
	from    map[string]time.Time
	fetches map[string]simFetchRun
}

// simFetchRun is a target's simulated fetch ahead: from start to end.
type simFetchRun struct {
	start, end time.Time
	dur        time.Duration
}

// simulateRevision runs the revision's rollout against the model.
func simulateRevision(namespace, name string, rev events.DeploymentRevisionCreated, m *simModel, o SimulateOptions) (*Prediction, error) {
	if err := rev.CheckPlan(); err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	if o.ProgressDeadline == 0 {
		o.ProgressDeadline = DefaultSimProgressDeadline
	}
	if o.TargetTimeout == 0 {
		o.TargetTimeout = DefaultSimTargetTimeout
	}
	s := &simulation{o: o, m: m, rev: rev, images: scoreImages(rev.Score), keys: events.Keys{Namespace: namespace, Name: name},
		handed: map[string]bool{}, groupOf: map[string]int{}, asked: map[int]bool{}, from: map[string]time.Time{},
		pred: &Prediction{Deployment: namespace + "/" + name, Generation: rev.Generation, RevisionID: rev.RevisionID, Seed: o.Seed,
			Start: o.Start.UTC(), Window: rev.Window, Targets: len(sortedSet(rev.Targets)), Canaries: len(sortedSet(rev.Canaries)), Model: SimModel{Samples: len(m.all)}}}
	if rev.Window != nil || (rev.Prefetch && rev.FetchWindow != nil) {
		s.zones()
	}
	for i, t := range rev.Targets {
		if i < len(rev.TargetGroups) {
			s.groupOf[t] = rev.TargetGroups[i]
		}
	}
	if rev.Prefetch {
		s.prefetch()
	}
	ev, err := events.New(s.keys, rev, events.WithCorrelation(rev.UID, rev.Generation), events.WithTime(o.Start))
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	s.fold(ev, o.Start)
	s.run()
	return s.pred, nil
}

func (s *simulation) fold(ev events.Event, at time.Time) {
	p := projections.NewStoredPayload(events.Record{Event: ev, Stored: at})
	s.r.FoldPayload(&p)
}

func (s *simulation) push(e simEvent) {
	s.n++
	e.order = s.n
	heap.Push(&s.q, e)
}

// run decides, then moves to the next thing that happens, until the
// rollout ends or nothing is left to happen.
func (s *simulation) run() {
	now := s.o.Start
	soak := time.Time{}
	for step := 0; step < maxSimSteps; step++ {
		s.decide(now)
		switch {
		case s.r.Terminal():
			s.end(string(map[projections.Stage]string{projections.StageSucceeded: "Succeeded", projections.StageFailed: "Failed"}[s.r.Stage]), now)
			return
		case s.r.Paused:
			s.end("Paused", now)
			return
		}
		if b := s.r.AwaitingApproval; b > 0 && !s.asked[b] {
			s.asked[b] = true
			d, ok := s.o.ApprovalDelays[b]
			if !ok {
				d = s.o.ApprovalDelay
			}
			if d < 0 {
				s.end("AwaitingApproval", now)
				return
			}
			s.push(simEvent{at: now.Add(d), batch: b})
		}
		if t := s.r.SoakEnds(); !t.IsZero() && !t.Equal(soak) {
			soak = t
			s.push(simEvent{at: t, wake: true})
		}
		if s.q.Len() == 0 {
			s.end("Waiting", now)
			return
		}
		next := heap.Pop(&s.q).(simEvent)
		if dl := s.r.Deadline(s.o.ProgressDeadline); s.r.DeadlineExceeded(next.at, s.o.ProgressDeadline) {
			at := s.deadlineAt(next.at, dl)
			if n := len(s.pred.DeadlineExceeded); n == 0 || !s.pred.DeadlineExceeded[n-1].Equal(at) {
				s.pred.DeadlineExceeded = append(s.pred.DeadlineExceeded, at.UTC())
			}
		}
		now = next.at
		s.happen(next, now)
	}
	s.end("Waiting", now)
}

// happen folds one event of the queue.
func (s *simulation) happen(e simEvent, now time.Time) {
	rev := s.rev
	switch {
	case e.wake:
	case e.batch > 0:
		d := events.NewRolloutTransition(events.TypeRolloutApproved, events.RolloutTransition{UID: rev.UID, Generation: rev.Generation,
			RevisionID: rev.RevisionID, Batch: e.batch, By: "simulated approval", Request: fmt.Sprintf("sim-%d", e.batch)})
		s.emit(d, now)
	case e.phase == "":
		d := events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{UID: rev.UID, Generation: rev.Generation,
			RevisionID: rev.RevisionID, Device: e.device, Error: "no result within the target timeout (simulated)"})
		s.emit(d, now)
	default:
		d := events.WorkloadStatus{Namespace: s.keys.Namespace, Deployment: s.keys.Name, UID: rev.UID, Generation: rev.Generation,
			RevisionID: rev.RevisionID, Phase: e.phase, Since: now}
		if e.phase == events.WorkloadFailed {
			d.Error = "failed (simulated from the device's history)"
		}
		ev, err := events.New(events.Keys{Device: e.device}, d, events.WithCorrelation(rev.UID, rev.Generation), events.WithTime(now))
		if err == nil {
			s.fold(ev, now)
		}
	}
}

// emit folds a transition the simulation decided and records it.
func (s *simulation) emit(d events.RolloutTransition, now time.Time) {
	ev, err := events.New(s.keys, d, events.WithCorrelation(s.rev.UID, s.rev.Generation), events.WithTime(now))
	if err != nil {
		return
	}
	s.fold(ev, now)
	st := SimStep{Time: now.UTC(), Offset: now.Sub(s.o.Start), Type: d.EventType(), Batch: d.Batch, Device: d.Device, Error: d.Error, Counts: s.r.Counts()}
	waited := 0
	for _, dev := range s.r.Released() {
		if !s.handed[dev] {
			s.handed[dev] = true
			st.Handed++
			from := s.windowWait(dev, now)
			if from.After(now) {
				waited++
			}
			s.from[dev] = from
			s.schedule(dev, from)
		}
	}
	if n, at := s.r.WindowWaiting(); waited > 0 && n > 0 {
		st.WindowWaiting, st.WindowOpens = n, at.UTC()
	}
	s.pred.Steps = append(s.pred.Steps, st)
	s.stage(st)
}

// decide folds every transition the state machine decides at now.
func (s *simulation) decide(now time.Time) {
	for range 64 {
		trs := s.r.NextAt(now)
		if len(trs) == 0 {
			return
		}
		for _, d := range trs {
			s.emit(d, now)
		}
	}
}

// windowWait is when device, handed the revision at now, may switch to
// it: now without a maintenance window or inside it; otherwise the
// window's opening in the device's local time (UTC: the history holds no
// device's time zone), after the device reported the wait as the agent
// does (Pending with WindowOpens, ADR 0029), folded so that the
// projection's own window rules hold the progress deadline.
func (s *simulation) windowWait(device string, now time.Time) time.Time {
	w := s.rev.Window
	if w == nil {
		return now
	}
	open, next, err := w.Open(now.In(s.zoneOf(device)))
	if err != nil || open {
		return now // a window that does not parse never waits, as on the agent
	}
	rev := s.rev
	d := events.WorkloadStatus{Namespace: s.keys.Namespace, Deployment: s.keys.Name, UID: rev.UID, Generation: rev.Generation,
		RevisionID: rev.RevisionID, Phase: events.WorkloadPending, Since: now, WindowOpens: &next}
	ev, err := events.New(events.Keys{Device: device}, d, events.WithCorrelation(rev.UID, rev.Generation), events.WithTime(now))
	if err != nil {
		return now
	}
	s.fold(ev, now)
	if at := s.r.WindowOpensOf(device); at.After(now) {
		return at
	}
	return now
}

// zoneOf is the time zone device reads a maintenance window in: the last
// it reported (its inventory's timeZone), else the first it reported
// later, else UTC (the prediction counts those).
func (s *simulation) zoneOf(device string) *time.Location {
	loc, _ := s.reportedZone(device)
	return loc
}

// reportedZone is device's zone and whether it reported one.
func (s *simulation) reportedZone(device string) (*time.Location, bool) {
	if loc, ok := s.m.zones[device]; ok {
		return loc, true
	}
	if loc, ok := s.m.laterZones[device]; ok {
		return loc, true
	}
	return time.UTC, false
}

// zones counts the zones the targets' windows are read in, and says in
// the assumptions how many targets are read in UTC for want of one.
func (s *simulation) zones() {
	z := &SimZones{Invalid: s.m.badZones}
	for _, dev := range sortedSet(s.rev.Targets) {
		if _, ok := s.reportedZone(dev); ok {
			z.Reported++
		} else {
			z.None++
		}
	}
	s.pred.TimeZones = z
	if z.None > 0 {
		var windows []string
		if w := s.rev.Window; w != nil {
			windows = append(windows, fmt.Sprintf("maintenance window (%s)", w))
		}
		if w := s.rev.FetchWindow; w != nil && s.rev.Prefetch {
			windows = append(windows, fmt.Sprintf("fetch window (%s)", w))
		}
		s.pred.Assumptions = append(s.pred.Assumptions, fmt.Sprintf(
			"the %s is read in UTC for %d of %d targets: they reported no time zone (an agent older than the inventory's timeZone, or one that cannot name its zone)",
			strings.Join(windows, " and the "), z.None, z.None+z.Reported))
	}
}

// prefetch simulates every target's fetch ahead of a revision with
// prefetch (ADR 0027): it starts when the revision is created or, with a
// fetch window closed then, at the window's opening in the target's zone
// (ADR 0029), and takes a fetch drawn from the recorded ones. A target
// without any recorded fetch to draw from has none.
func (s *simulation) prefetch() {
	f := &SimFetch{Window: s.rev.FetchWindow}
	s.pred.Fetch = f
	s.fetches = map[string]simFetchRun{}
	for _, dev := range sortedSet(s.rev.Targets) {
		dur, ok := s.drawFetch(dev)
		if !ok {
			continue
		}
		start := s.o.Start
		if w := s.rev.FetchWindow; w != nil {
			if open, next, err := w.Open(start.In(s.zoneOf(dev))); err == nil && !open {
				start = next
			}
		}
		run := simFetchRun{start: start, end: start.Add(dur), dur: dur}
		s.fetches[dev] = run
		if f.FirstStart.IsZero() || run.start.Before(f.FirstStart) {
			f.FirstStart = run.start.UTC()
		}
		if run.end.After(f.LastEnd) {
			f.LastEnd = run.end.UTC()
		}
	}
}

// drawFetch picks a recorded fetch duration for device: of its own
// sharing the most of the revision's images, else any of its own, else
// its budget group's, else the fleet's; the seed and the device id decide
// which (a stream of draws apart from the convergence's).
func (s *simulation) drawFetch(device string) (time.Duration, bool) {
	rng := s.rng("fetch/" + device)
	pick := func(pool []simFetch) time.Duration { return pool[rng.IntN(len(pool))].dur }
	own := s.m.fetches[device]
	same := mostShared(own, func(x simFetch) []string { return x.images }, s.images)
	switch {
	case len(same) > 0:
		return pick(same), true
	case len(own) > 0:
		return pick(own), true
	}
	if g, ok := s.groupOf[device]; ok {
		var pool []simFetch
		for dev, xs := range s.m.fetches {
			if gg, ok := s.groupOf[dev]; ok && gg == g {
				pool = append(pool, xs...)
			}
		}
		if len(pool) > 0 {
			slices.SortFunc(pool, func(a, b simFetch) int { return cmp.Or(cmp.Compare(a.dur, b.dur), a.at.Compare(b.at)) })
			return pick(pool), true
		}
	}
	if len(s.m.fetchesAll) > 0 {
		return pick(s.m.fetchesAll), true
	}
	return 0, false
}

// rng is the seeded source of the draws of one stream (a device's
// convergence, its fetch, its switch).
func (s *simulation) rng(stream string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return rand.New(rand.NewPCG(s.o.Seed, h.Sum64()))
}

// behave turns a drawn sample into the device's answer to this revision.
// Without prefetch the pull is part of the convergence: a sample of a
// fetch ahead counts its fetch and its switch. With prefetch, a device
// whose fetch started before it could switch waits for the fetch's end,
// then takes only the switch part of its convergence; one that could
// switch before its fetch started, or without a recorded fetch, pulls
// while it switches, as without prefetch.
func (s *simulation) behave(device string, smp simSample) simSample {
	if !s.rev.Prefetch {
		smp.dur = smp.full()
		return smp
	}
	f := s.pred.Fetch
	run, fetched := s.fetches[device]
	from := s.from[device]
	switch {
	case !fetched:
		f.NoHistory++
		smp.dur = smp.full()
	case run.start.After(from):
		f.Unfetched++
		smp.dur = smp.full()
	default:
		wait := max(run.end.Sub(from), 0)
		if wait > 0 {
			f.Joined++
		} else {
			f.Fetched++
		}
		smp.dur = wait + s.switchPart(device, smp, run.dur)
	}
	return smp
}

// switchPart is the switch of a drawn sample: its own split, else one of
// the device's recorded switches (a sample of a fetch ahead sharing the
// most images), else its convergence minus the drawn fetch (counted as
// estimated).
func (s *simulation) switchPart(device string, smp simSample, fetch time.Duration) time.Duration {
	if smp.split {
		return smp.sw
	}
	var same []simSample
	most := 0
	for _, x := range s.m.byDevice[device] {
		if !x.split || x.outcome != events.WorkloadConverged {
			continue
		}
		switch n := shared(x.images, s.images); {
		case n > most || len(same) == 0:
			most, same = n, append(same[:0], x)
		case n == most:
			same = append(same, x)
		}
	}
	if len(same) > 0 {
		return same[s.rng("switch/"+device).IntN(len(same))].sw
	}
	s.pred.Fetch.Estimated++
	return max(smp.dur-fetch, 0)
}

// deadlineAt is when the progress deadline dl was exceeded at or before
// until, given the rollout's state: the earliest of its candidates (the
// last progress, or a target's window opening, plus dl) at which the
// projection's own DeadlineExceeded holds.
func (s *simulation) deadlineAt(until time.Time, dl time.Duration) time.Time {
	best := until
	try := func(from time.Time) {
		if at := from.Add(dl); !from.IsZero() && at.Before(best) && s.r.DeadlineExceeded(at, s.o.ProgressDeadline) {
			best = at
		}
	}
	try(s.r.ProgressAt)
	for dev := range s.handed {
		try(s.r.WindowOpensOf(dev))
	}
	return best
}

// schedule draws how device answers the revision it may switch to from
// now on: the target timeout, like the result, runs from then (the
// operator's rule: from the window's opening for a target that waited).
func (s *simulation) schedule(device string, now time.Time) {
	smp, ok := s.draw(device)
	switch {
	case !ok:
		s.push(simEvent{at: now.Add(DefaultSimConverge), device: device, phase: events.WorkloadConverged})
	case smp.outcome == "":
		s.push(simEvent{at: now.Add(s.o.TargetTimeout), device: device})
	default:
		s.push(simEvent{at: now.Add(smp.dur), device: device, phase: smp.outcome})
	}
}

// draw picks one recorded sample for device: of its own with the most of
// the revision's images (a sidecar every revision runs does not make
// every revision the same), else any of its own, else its budget group's,
// else the fleet's; the seed and the device id decide which.
func (s *simulation) draw(device string) (simSample, bool) {
	smp, ok := s.drawSample(device)
	if !ok {
		return smp, false
	}
	return s.behave(device, smp), true
}

// drawSample is draw's recorded sample, as it was recorded.
func (s *simulation) drawSample(device string) (simSample, bool) {
	h := fnv.New64a()
	h.Write([]byte(device))
	rng := rand.New(rand.NewPCG(s.o.Seed, h.Sum64()))
	pick := func(pool []simSample) simSample { return pool[rng.IntN(len(pool))] }
	own := s.m.byDevice[device]
	same := mostShared(own, func(x simSample) []string { return x.images }, s.images)
	switch {
	case len(same) > 0:
		s.pred.Model.Own++
		return pick(same), true
	case len(own) > 0:
		s.pred.Model.Own++
		return pick(own), true
	}
	if g, ok := s.groupOf[device]; ok {
		var pool []simSample
		for dev, xs := range s.m.byDevice {
			if gg, ok := s.groupOf[dev]; ok && gg == g {
				pool = append(pool, xs...)
			}
		}
		if len(pool) > 0 {
			// A total order: the pool was gathered in map order.
			slices.SortFunc(pool, func(a, b simSample) int {
				return cmp.Or(cmp.Compare(a.dur, b.dur), cmp.Compare(a.outcome, b.outcome), a.handed.Compare(b.handed))
			})
			s.pred.Model.Group++
			return pick(pool), true
		}
	}
	if len(s.m.all) > 0 {
		s.pred.Model.Fleet++
		return pick(s.m.all), true
	}
	s.pred.Model.Default++
	return simSample{}, false
}

// mostShared is the items of pool sharing the most of images (at least
// one), in pool's order.
func mostShared[T any](pool []T, imagesOf func(T) []string, images []string) []T {
	var same []T
	most := 1
	for _, x := range pool {
		switch n := shared(imagesOf(x), images); {
		case n > most:
			most, same = n, append(same[:0], x)
		case n == most:
			same = append(same, x)
		}
	}
	return same
}

// shared counts the images of a (sorted) that b (sorted) has too.
func shared(a, b []string) int {
	n := 0
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); ok {
			n++
		}
	}
	return n
}

// stage notes a step's stage start or end.
func (s *simulation) stage(st SimStep) {
	find := func(name string) *SimStage {
		for i := range s.pred.Stages {
			if s.pred.Stages[i].Name == name {
				return &s.pred.Stages[i]
			}
		}
		s.pred.Stages = append(s.pred.Stages, SimStage{Name: name})
		return &s.pred.Stages[len(s.pred.Stages)-1]
	}
	for _, m := range stageMarks(st.Type, st.Batch) {
		g := find(m.name)
		switch {
		case m.start && g.Start.IsZero():
			g.Start = st.Time
		case !m.start && g.End.IsZero():
			g.End, g.Outcome = st.Time, m.outcome
		}
	}
}

// stageMark says a transition starts or ends a stage.
type stageMark struct {
	name    string
	start   bool
	outcome string
}

// stageMarks maps a transition to the stages it starts or ends: the
// canary stage (canary-stage → canaries-converged or canary-failed), each
// batch (batch-started → batch-succeeded or batch-failed) and the release
// (released → succeeded or failed), and the whole rollout (started →
// succeeded or failed).
func stageMarks(t events.Type, batch int) []stageMark {
	b := fmt.Sprintf("batch %d", batch)
	switch t {
	case events.TypeRolloutCanaryStage:
		return []stageMark{{name: "canary", start: true}}
	case events.TypeRolloutCanariesConverged:
		return []stageMark{{name: "canary", outcome: "succeeded"}}
	case events.TypeRolloutCanaryFailed:
		return []stageMark{{name: "canary", outcome: "failed"}}
	case events.TypeRolloutBatchStarted:
		return []stageMark{{name: b, start: true}}
	case events.TypeRolloutBatchSucceeded:
		return []stageMark{{name: b, outcome: "succeeded"}}
	case events.TypeRolloutBatchFailed:
		return []stageMark{{name: b, outcome: "failed"}}
	case events.TypeRolloutReleased:
		return []stageMark{{name: "release", start: true}}
	case events.TypeRolloutSucceeded:
		return []stageMark{{name: "release", outcome: "succeeded"}, {name: "rollout", outcome: "succeeded"}}
	case events.TypeRolloutFailed:
		return []stageMark{{name: "release", outcome: "failed"}, {name: "rollout", outcome: "failed"}}
	case events.TypeRolloutStarted:
		return []stageMark{{name: "rollout", start: true}}
	}
	return nil
}

// end records how the simulation ended.
func (s *simulation) end(how string, at time.Time) {
	c := s.r.Counts()
	s.pred.End, s.pred.EndAt = how, at.UTC()
	s.pred.Handed, s.pred.Succeeded, s.pred.Failed = len(s.handed), c.Succeeded, c.Failed
	// A release stage that never started is not a stage of this plan.
	s.pred.Stages = slices.DeleteFunc(s.pred.Stages, func(g SimStage) bool { return g.Start.IsZero() && g.Name == "release" })
}

// ErrNothingToSimulate is returned when a Deployment has no recorded
// revision to replay.
var ErrNothingToSimulate = errors.New("nothing to simulate")
