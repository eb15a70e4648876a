package projections

import (
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Stage is where a revision's rollout is.
type Stage string

// Rollout stages, in order. Succeeded and Failed are terminal.
const (
	StageNone              Stage = ""
	StageStarted           Stage = "Started"
	StageCanary            Stage = "Canary"
	StageCanariesConverged Stage = "CanariesConverged"
	StageReleased          Stage = "Released"
	StageSucceeded         Stage = "Succeeded"
	StageFailed            Stage = "Failed"
)

// DeviceResult is the latest report of one target for the current revision.
// Latest is in stream order: the fold takes reports in the order the
// stream stored them, and a later report always replaces an earlier one.
// Since is the device's own clock (a device without a real-time clock jumps
// in time at boot): shown, never used to order reports.
type DeviceResult struct {
	Phase events.WorkloadPhase
	Error string
	Since time.Time
	// Order is the report's position among the reports this fold took for
	// the Deployment (1, 2, …): stream order, which decides which of two
	// devices' failures is the latest.
	Order uint64 `json:",omitempty"`
	// First is when the stream stored the target's first report of the
	// revision, Settled when it stored its first Converged or Failed
	// (zero: none yet, or the time was unknown). Both move the rollout's
	// progress clock (Rollout.ProgressAt); later reports never do.
	First   time.Time `json:",omitzero"`
	Settled time.Time `json:",omitzero"`
	// WindowOpens is when the target's maintenance window opens, on the
	// operator's clock, when its latest report is a Pending that waits
	// for the revision's window (ADR 0029): the stored time plus the wait
	// the device reported (more than 0, at most MaxWindowWait). Zero
	// otherwise, and always for a revision without a window.
	WindowOpens time.Time `json:",omitzero"`
}

// next is the result of a report of phase, error and device time since,
// stored at stored, that follows prev (the zero value: no report yet);
// had says whether there was one.
func (prev DeviceResult) next(had bool, phase events.WorkloadPhase, errText string, since, stored time.Time, order uint64) DeviceResult {
	res := DeviceResult{Phase: phase, Error: errText, Since: since, Order: order, First: prev.First, Settled: prev.Settled}
	if !had {
		res.First = stored
	}
	if finished(phase) && res.Settled.IsZero() && !(had && finished(prev.Phase) && prev.Settled.IsZero()) {
		res.Settled = stored
	}
	return res
}

// Rollout is the state of one Deployment's current revision, folded from its
// intent events, its rollout transitions and its targets' workload reports.
// The zero value is a Deployment without a revision. Rollout is a value: Apply
// returns a new state and never changes the receiver's maps.
type Rollout struct {
	UID        string
	Generation int64
	RevisionID string
	// Targets and Canaries are frozen, sorted.
	Targets  []string
	Canaries []string
	Stage    Stage
	// ReleasedAll is set once the revision was released to every target.
	ReleasedAll bool
	// StageAt is the time of the event that entered the current stage (the
	// revision event for StageNone).
	StageAt time.Time
	// Results holds the latest report per target.
	Results map[string]DeviceResult
	// LastFailure is the latest failure report of a target, in stream
	// order; LastFailAt is the time the device's clock gave it.
	LastFailure *events.RolloutTransition
	LastFailAt  time.Time
	// lastFailOrder is LastFailure's Order.
	lastFailOrder uint64
	// Deleted is true once the Deployment was deleted.
	Deleted bool
	// Removed lists the frozen targets removed from the revision's
	// accounting (rollout.target-removed), in the order they were removed;
	// they are no longer in Targets or Canaries.
	Removed []RemovedTarget
	// CanariesAt and ReleasedAt are the times of the canary-stage and
	// released transitions (zero: not yet): when targets were handed the
	// revision. Operator times, never a device's.
	CanariesAt, ReleasedAt time.Time
	// reports counts the reports this fold took (of any revision): the
	// Order of the next one.
	reports uint64
	// early holds reports and transitions of revisions this fold has not seen
	// yet: streams are read separately, so a report or transition may be
	// folded before its revision event. They are merged when it arrives.
	early map[revKey]*earlyFacts
	// counts is Counts kept up to date report by report when countsOK (a
	// state restored from JSON computes them again on its next report).
	counts   events.RolloutCounts
	countsOK bool

	// Plan is the revision's frozen rollout plan (ADR 0016); nil: the
	// spec's rollout, canaries then every target at once.
	Plan *events.RolloutPlan
	// Batches is the state of each plan batch, in plan order.
	Batches []BatchState
	// Batch is the last plan batch started (0: none yet).
	Batch int
	// AwaitingApproval is the batch a rollout.awaiting-approval announced
	// that no approval answered yet (0: none).
	AwaitingApproval int
	// Paused is set by rollout.paused and cleared by rollout.resumed: no
	// target is handed the revision meanwhile. PausedBy is who asked;
	// PauseReason the failure that paused it, if one did.
	Paused                bool
	PausedBy, PauseReason string
	// batchOf is each non-canary target's plan batch (1-based).
	batchOf map[string]int
	// With a disruption budget: each target's group (index into
	// Plan.Budget.Values), and when each batch device was handed the
	// revision (a batch is handed in waves).
	groupOf map[string]int
	handed  map[string]time.Time
	// budgetExtra are the budget label values of followers the frozen
	// plan does not know (ADR 0026), in the order they first joined:
	// value i is group len(Plan.Budget.Values)+1+i, a group of its own.
	budgetExtra []string
	// budget is the disruption budget's bookkeeping, kept up to date by
	// in-place folds (nil: computed when needed; see budgetCache).
	budget *budgetCache
	// tallies is BatchTallies kept up to date report by report when
	// talliesOK.
	tallies   []BatchTally
	talliesOK bool
	// requests are the request ids of the approvals, pauses and resumes
	// folded for the revision.
	requests map[string]bool
	// ProgressAt is the progress clock: the latest of the revision
	// event's time, the time of any transition of the revision (a resume
	// or an approval restarts it), and the times the stream stored each
	// target's first report of the revision and its first Converged or
	// Failed (DeviceResult.First and Settled). A Pending or Applying
	// report that is not a target's first never moves it, so a device can
	// put the progress deadline off at most twice. Times are the
	// operator's and the stream's, never a device's clock.
	ProgressAt time.Time
	// ProgressDeadline is the revision's own progress deadline
	// (spec.rollout.progressDeadline, frozen in its event); 0: the
	// operator's (DeadlineExceeded's def).
	ProgressDeadline time.Duration
	// LastSucceeded is the greatest generation of this Deployment UID,
	// older than the revision's, whose rollout succeeded (0: none): what
	// onFailure Rollback hands back. RolledBackTo is the generation a
	// rollout.rolled-back of the revision handed back (0: none).
	LastSucceeded, RolledBackTo int64
	// Follow is set when the revision follows its selector (ADR 0026):
	// devices join it (rollout.target-added) and leave it (a
	// rollout.target-removed marked Follow) after it was frozen.
	Follow bool
	// Followers are the targets that joined the revision after it was
	// frozen, in the order they joined; one that leaves is no longer
	// here (it is in Removed).
	Followers []Follower
	// joined is when each follower joined (Followers by device).
	joined map[string]time.Time
	// Window is the revision's maintenance window (ADR 0029): a target
	// switches to it only inside the window, and one that waits for it
	// is neither failed nor stuck (rollout_window.go). Nil: none.
	Window *events.MaintenanceWindow
}

// Follower is a target that joined a revision after it was frozen: why,
// the change that made it match, and the time of its rollout.target-added.
type Follower struct {
	Device string    `json:"device"`
	Reason string    `json:"reason"`
	Change string    `json:"change,omitempty"`
	At     time.Time `json:"at"`
	// HandedGeneration and HandedRevisionID: the follower joined after
	// the revision's rollout failed and was handed the Deployment's last
	// revision whose rollout succeeded instead (0: it runs this one). It
	// is then no target of this revision and in none of its counts.
	HandedGeneration int64  `json:"handedGeneration,omitempty"`
	HandedRevisionID string `json:"handedRevisionId,omitempty"`
}

type revKey struct {
	uid string
	gen int64
}

// RemovedTarget is a frozen target removed from a revision's accounting.
type RemovedTarget struct {
	Device string `json:"device"`
	Reason string `json:"reason"`
}

type earlyFacts struct {
	removed []RemovedTarget
	// members are the revision's target-added and target-removed
	// transitions in order: replayed in place of removed when the
	// revision has followers (ADR 0026), so a join and a removal of one
	// device keep their order.
	members []events.Event
	// follow: members hold a follow transition.
	follow                 bool
	canariesAt, releasedAt time.Time
	results                map[string]DeviceResult
	// failures holds each device's latest failure report.
	failures    map[string]DeviceResult
	stage       Stage
	stageAt     time.Time
	releasedAll bool
	// progressAt is the latest time of the revision's transitions.
	progressAt time.Time
	// controls are the plan's transitions and pauses and resumes, in
	// order, folded once the revision is.
	controls []events.Event
}

// IsCanary reports whether device is a canary of the revision.
func (r Rollout) IsCanary(device string) bool {
	_, ok := slices.BinarySearch(r.Canaries, device)
	return ok
}

// IsTarget reports whether device is a frozen target of the revision.
func (r Rollout) IsTarget(device string) bool {
	_, ok := slices.BinarySearch(r.Targets, device)
	return ok
}

// Apply folds one event into the state. Events of other revisions (older
// generations, other UIDs), duplicates and a revision that still names
// target chunks (assemble it with an events.RevisionAssembler first) leave
// the state unchanged.
func (r Rollout) Apply(ev events.Event) Rollout {
	p := NewPayload(ev)
	return r.apply(&p, false)
}

// Fold is Apply in place: r's maps are changed rather than copied, so a
// report costs O(1) instead of O(targets). Only for a state no other copy
// of which is in use (the rollout runner's own).
func (r *Rollout) Fold(ev events.Event) {
	p := NewPayload(ev)
	*r = r.apply(&p, true)
}

// FoldPayload is Fold of p's event, reading the data p decoded already (a
// reader that decoded a report to route it does not decode it again).
func (r *Rollout) FoldPayload(p *Payload) { *r = r.apply(p, true) }

func (r Rollout) apply(p *Payload, inPlace bool) Rollout {
	n := r.applyEvent(p, inPlace)
	if !inPlace {
		n.budget = nil // shared with r: the copy computes its own
	} else if n.budgeted() && n.budget == nil {
		n.budget = n.newBudgetCache()
	}
	return n
}

func (r Rollout) applyEvent(p *Payload, inPlace bool) Rollout {
	switch p.Event.Type {
	case events.TypeDeploymentRevisionCreated:
		return r.applyRevision(p)
	case events.TypeDeploymentDeleted:
		n := r
		n.Deleted = true
		return n
	case events.TypeWorkloadStatus:
		return r.applyReport(p, inPlace)
	}
	if info, ok := p.Event.Type.Info(); ok && info.Family == events.FamilyDeploymentRollout {
		return r.applyTransition(p, inPlace)
	}
	return r
}

// applyRevision starts the fold of a newer revision, merging the early facts
// folded for it and keeping those of revisions that may still come.
func (r Rollout) applyRevision(p *Payload) Rollout {
	ev := &p.Event
	d, err := p.RevisionCreated()
	if err != nil || d.TargetChunks > 0 || !r.newer(d.UID, d.Generation) {
		// A chunked revision is folded once assembled
		// (events.RevisionAssembler).
		return r
	}
	n := Rollout{UID: d.UID, Generation: d.Generation, RevisionID: d.RevisionID, StageAt: ev.Time, ProgressAt: ev.Time,
		Targets: sortedCopy(d.Targets), Canaries: sortedCopy(d.Canaries), Results: map[string]DeviceResult{}, reports: r.reports,
		ProgressDeadline: time.Duration(d.ProgressDeadlineSeconds) * time.Second, Follow: d.Follow, Window: d.Window}
	if r.UID == d.UID {
		n.LastSucceeded = r.LastSucceeded
		if r.Stage == StageSucceeded {
			n.LastSucceeded = max(n.LastSucceeded, r.Generation)
		}
	}
	for k, f := range r.early {
		// The facts of an older revision of this UID are dropped below;
		// its success is kept.
		if k.uid == d.UID && k.gen < d.Generation && f.stage == StageSucceeded {
			n.LastSucceeded = max(n.LastSucceeded, k.gen)
		}
	}
	if d.Plan != nil && len(d.Plan.Batches) > 0 {
		n.Plan = d.Plan
		n.Batches = make([]BatchState, len(d.Plan.Batches))
		n.batchOf = batchIndex(d, n.Canaries)
		if d.Plan.Budget != nil {
			n.groupOf = groupIndex(d, 0)
			n.handed = map[string]time.Time{}
		}
	}
	key := revKey{d.UID, d.Generation}
	if f := r.early[key]; f != nil {
		n.mergeEarly(f)
	}
	// Keep only facts of revisions that may still come (later ones).
	for k, f := range r.early {
		if k != key && (k.uid != d.UID || k.gen > d.Generation) {
			if n.early == nil {
				n.early = map[revKey]*earlyFacts{}
			}
			n.early[k] = f
		}
	}
	return n
}

// mergeEarly folds the early facts of r's revision: its targets' reports
// and failures, and the stage its transitions reached.
func (r *Rollout) mergeEarly(f *earlyFacts) {
	var joined map[string]bool
	if f.follow {
		// Followers' reports may come before the revision and their
		// target-added (a rebuild reads the streams side by side).
		joined = map[string]bool{}
		for _, ev := range f.members {
			if ev.Type == events.TypeRolloutTargetAdded {
				if d, err := events.Decode[events.RolloutTransition](ev); err == nil {
					joined[d.Device] = true
				}
			}
		}
	}
	for dev, res := range f.results {
		if r.IsTarget(dev) || joined[dev] {
			if r.Window == nil {
				res.WindowOpens = time.Time{} // a claim the revision does not back
			}
			r.Results[dev] = res
			r.progress(res.First)
			r.progress(res.Settled)
		}
	}
	r.progress(f.progressAt)
	for dev, res := range f.failures {
		if r.IsTarget(dev) || joined[dev] {
			r.noteFailure(dev, res)
		}
	}
	if f.stage != StageNone {
		r.Stage, r.ReleasedAll, r.StageAt = f.stage, f.releasedAll, f.stageAt
	}
	r.CanariesAt, r.ReleasedAt = f.canariesAt, f.releasedAt
	if f.follow {
		for i := range f.members {
			p := NewPayload(f.members[i])
			if d, err := p.RolloutTransition(); err == nil {
				*r = r.applyMember(&p.Event, d)
			}
		}
	} else {
		for _, rm := range f.removed {
			*r = r.removeTarget(rm.Device, rm.Reason)
		}
	}
	for i := range f.controls {
		p := NewPayload(f.controls[i])
		if d, err := p.RolloutTransition(); err == nil {
			*r = r.applyControl(&p.Event, d, true)
		}
	}
}

// applyReport folds a workload report: a target's report of the current
// revision, or an early fact of a later one. Reports come in stream order,
// so the report folded last is the device's latest, whatever its Since says.
func (r Rollout) applyReport(p *Payload, inPlace bool) Rollout {
	d, err := p.WorkloadStatus()
	if err != nil {
		return r
	}
	device := p.Event.Keys.Device
	if d.UID != r.UID || d.Generation != r.Generation {
		if !r.newer(d.UID, d.Generation) {
			return r // a report of an older revision
		}
		order := r.reports + 1
		n := r.withEarly(d.UID, d.Generation, inPlace, func(f *earlyFacts) {
			prev, had := f.results[device]
			res := prev.next(had, d.Phase, d.Error, d.Since, p.Stored, order)
			res.WindowOpens = prev.windowOpening(d, p.Stored) // kept only if the revision has a window
			f.results[device] = res
			if d.Phase == events.WorkloadFailed {
				f.failures[device] = f.results[device]
			}
		})
		n.reports = order
		return n
	}
	if !r.IsTarget(device) {
		return r
	}
	prev, had := r.Results[device]
	n := r
	n.reports++
	if !inPlace {
		n.Results = maps(r.Results)
	}
	if !n.countsOK {
		n.counts, n.countsOK = n.computeCounts(), true
	}
	res := prev.next(had, d.Phase, d.Error, d.Since, p.Stored, n.reports)
	if n.Window != nil {
		res.WindowOpens = prev.windowOpening(d, p.Stored)
	}
	n.progress(res.First)
	n.progress(res.Settled)
	canary := n.IsCanary(device)
	tally(&n.counts, prev.Phase, canary, -1)
	tally(&n.counts, res.Phase, canary, +1)
	if n.planned() {
		if !n.talliesOK {
			n.tallies, n.talliesOK = n.computeTallies(), true
		} else if !inPlace {
			n.tallies = slices.Clone(n.tallies)
		}
		tallyBatch(n.tallies, n.BatchOf(device), prev.Phase, res.Phase)
	}
	if inPlace && n.budget != nil {
		n.budget.report(n, device, prev.Phase, res.Phase)
	}
	n.Results[device] = res
	n.noteFailure(device, res)
	return n
}

// applyTransition folds a rollout transition: the current revision's stage
// moves forward, or an early fact of a later revision is kept.
func (r Rollout) applyTransition(p *Payload, inPlace bool) Rollout {
	ev := &p.Event
	d, err := p.RolloutTransition()
	if err != nil {
		return r
	}
	if d.UID != r.UID || d.Generation != r.Generation {
		if !r.newer(d.UID, d.Generation) {
			if ev.Type == events.TypeRolloutSucceeded && d.UID == r.UID && d.Generation > r.LastSucceeded {
				n := r
				n.LastSucceeded = d.Generation // an older revision's success, read late
				return n
			}
			return r
		}
		return r.withEarly(d.UID, d.Generation, inPlace, func(f *earlyFacts) {
			if ev.Time.After(f.progressAt) {
				f.progressAt = ev.Time
			}
			if planControl(ev.Type) {
				f.controls = append(slices.Clip(f.controls), *ev)
				return
			}
			if st := stageAfter(ev.Type, f.stage); st != f.stage {
				f.stage, f.stageAt = st, ev.Time
			}
			f.releasedAll = f.releasedAll || ev.Type == events.TypeRolloutReleased
			switch ev.Type {
			case events.TypeRolloutCanaryStage:
				f.canariesAt = ev.Time
			case events.TypeRolloutReleased:
				f.releasedAt = ev.Time
			case events.TypeRolloutTargetRemoved:
				f.removed = append(slices.Clip(f.removed), RemovedTarget{Device: d.Device, Reason: d.Error})
				f.members = append(slices.Clip(f.members), *ev)
				f.follow = f.follow || d.Follow
			case events.TypeRolloutTargetAdded:
				f.members = append(slices.Clip(f.members), *ev)
				f.follow = true
			}
		})
	}
	if planControl(ev.Type) {
		n := r.applyControl(ev, d, inPlace)
		n.progress(ev.Time)
		return n
	}
	n := r
	n.progress(ev.Time)
	if st := stageAfter(ev.Type, r.Stage); st != r.Stage {
		n.Stage, n.StageAt = st, ev.Time
	}
	switch ev.Type {
	case events.TypeRolloutCanaryStage:
		if n.CanariesAt.IsZero() {
			n.CanariesAt = ev.Time
		}
	case events.TypeRolloutReleased:
		n.ReleasedAll = true
		if n.ReleasedAt.IsZero() {
			n.ReleasedAt = ev.Time
		}
	case events.TypeRolloutTargetRemoved, events.TypeRolloutTargetAdded:
		return n.applyMember(ev, d)
	}
	return n
}

// applyMember folds a membership transition of the current revision: a
// removal from the accounting, a follower joining (ADR 0026), or a
// follower or frozen target leaving a Follow revision.
func (r Rollout) applyMember(ev *events.Event, d events.RolloutTransition) Rollout {
	switch {
	case ev.Type == events.TypeRolloutTargetAdded && d.HandedGeneration > 0:
		return r.addHanded(Follower{Device: d.Device, Reason: d.Reason, Change: d.Change, At: ev.Time,
			HandedGeneration: d.HandedGeneration, HandedRevisionID: d.HandedRevisionID})
	case ev.Type == events.TypeRolloutTargetAdded:
		return r.addTarget(Follower{Device: d.Device, Reason: d.Reason, Change: d.Change, At: ev.Time}, d.Batch, d.BudgetGroup)
	}
	// A follow removal (d.Follow) leaves the accounting as any removal
	// does; the intent fold takes the revision back.
	return r.removeTarget(d.Device, d.Error)
}

// addTarget makes f.Device a target of the revision: it joins like any
// target (handed the revision with the release, at once when that came
// already), counts in every count, and leaves Removed if it was there. A
// device that is a target already changes nothing. With a plan it joins
// plan batch batch (out of range: the last) and, with a disruption
// budget, the group of label value group (none: the group of targets
// without the label; a value the plan does not know: a group of its own).
func (r Rollout) addTarget(f Follower, batch int, group string) Rollout {
	if f.Device == "" || r.IsTarget(f.Device) {
		return r
	}
	n := r
	if r.planned() {
		if batch < 1 || batch > len(r.Plan.Batches) {
			batch = len(r.Plan.Batches)
		}
		n.batchOf = make(map[string]int, len(r.batchOf)+1)
		for k, v := range r.batchOf {
			n.batchOf[k] = v
		}
		n.batchOf[f.Device] = batch
		if r.budgeted() {
			g, ok := slices.BinarySearch(r.Plan.Budget.Values, group)
			switch {
			case group == "":
				g = len(r.Plan.Budget.Values)
			case !ok:
				// A value the frozen plan does not know: a group of its
				// own, as the freeze would have made it.
				i := slices.Index(r.budgetExtra, group)
				if i < 0 {
					i = len(r.budgetExtra)
					n.budgetExtra = append(slices.Clip(r.budgetExtra), group)
				}
				g = len(r.Plan.Budget.Values) + 1 + i
			}
			n.groupOf = make(map[string]int, len(r.groupOf)+1)
			for k, v := range r.groupOf {
				n.groupOf[k] = v
			}
			n.groupOf[f.Device] = g
		}
	}
	i, _ := slices.BinarySearch(r.Targets, f.Device)
	n.Targets = slices.Insert(slices.Clone(r.Targets), i, f.Device)
	if slices.ContainsFunc(r.Removed, func(rm RemovedTarget) bool { return rm.Device == f.Device }) {
		n.Removed = slices.DeleteFunc(slices.Clone(r.Removed), func(rm RemovedTarget) bool { return rm.Device == f.Device })
	}
	n.Followers = append(slices.Clip(r.Followers), f)
	n.joined = followerIndex(n.Followers)
	n.countsOK, n.talliesOK, n.budget = false, false, nil
	return n
}

// addHanded records f, a device that joined after the revision's rollout
// failed and was handed f.HandedGeneration instead (ADR 0026): a follower
// of the Deployment, listed with the revision it runs, but no target of
// this one (its reports are of the other revision). A device that is a
// target or a follower already changes nothing.
//
// A follower of this revision (a target that joined, HandedGeneration 0)
// is the runner's follow-up after the rollout failed before handing it
// the revision (UnhandedFollowers): it leaves the targets (and so every
// count) and is listed with the revision it is handed, keeping the
// reason, change and time it joined.
func (r Rollout) addHanded(f Follower) Rollout {
	if f.Device == "" {
		return r
	}
	if i := slices.IndexFunc(r.Followers, func(o Follower) bool { return o.Device == f.Device }); i >= 0 &&
		r.Followers[i].HandedGeneration == 0 && r.IsTarget(f.Device) {
		n := r
		n.Targets = without(r.Targets, f.Device)
		n.Followers = slices.Clone(r.Followers)
		n.Followers[i].HandedGeneration, n.Followers[i].HandedRevisionID = f.HandedGeneration, f.HandedRevisionID
		n.countsOK, n.talliesOK, n.budget = false, false, nil
		return n
	}
	if _, ok := r.joined[f.Device]; ok || r.IsTarget(f.Device) {
		return r
	}
	n := r
	if slices.ContainsFunc(r.Removed, func(rm RemovedTarget) bool { return rm.Device == f.Device }) {
		n.Removed = slices.DeleteFunc(slices.Clone(r.Removed), func(rm RemovedTarget) bool { return rm.Device == f.Device })
	}
	n.Followers = append(slices.Clip(r.Followers), f)
	n.joined = followerIndex(n.Followers)
	n.countsOK = false
	return n
}

// Holds reports whether device takes part in the revision's Follow
// accounting: a target, or a follower handed the last revision that
// succeeded (addHanded).
func (r Rollout) Holds(device string) bool {
	if r.IsTarget(device) {
		return true
	}
	_, ok := r.joined[device]
	return ok
}

// JoinedAt is when device joined the revision as a follower (zero: it is
// a frozen target, or no target).
func (r Rollout) JoinedAt(device string) time.Time { return r.joined[device] }

// removeTarget takes device out of the revision's accounting: out of
// Targets and Canaries (so out of the counts), into Removed. A device that
// is no target (removed already) changes nothing.
func (r Rollout) removeTarget(device, reason string) Rollout {
	if !r.IsTarget(device) {
		if _, ok := r.joined[device]; ok {
			// A follower handed the last revision that succeeded.
			n := r
			n.Removed = append(slices.Clip(r.Removed), RemovedTarget{Device: device, Reason: reason})
			n.Followers = slices.DeleteFunc(slices.Clone(r.Followers), func(f Follower) bool { return f.Device == device })
			n.joined = followerIndex(n.Followers)
			n.countsOK = false
			return n
		}
		return r
	}
	n := r
	n.Targets = without(r.Targets, device)
	if r.IsCanary(device) {
		n.Canaries = without(r.Canaries, device)
	}
	n.Removed = append(slices.Clip(r.Removed), RemovedTarget{Device: device, Reason: reason})
	if _, ok := r.joined[device]; ok {
		n.Followers = slices.DeleteFunc(slices.Clone(r.Followers), func(f Follower) bool { return f.Device == device })
		n.joined = followerIndex(n.Followers)
	}
	n.countsOK, n.talliesOK, n.budget = false, false, nil
	return n
}

func followerIndex(fs []Follower) map[string]time.Time {
	m := make(map[string]time.Time, len(fs))
	for _, f := range fs {
		m[f.Device] = f.At
	}
	return m
}

// HandedAt is when device, a target, was handed the revision (zero: not
// yet): the canary stage for canaries, the release for the rest.
func (r Rollout) HandedAt(device string) time.Time {
	at := r.handedAt(device)
	if j := r.joined[device]; !at.IsZero() && j.After(at) {
		return j // a follower is handed it when it joins, at the earliest
	}
	return at
}

func (r Rollout) handedAt(device string) time.Time {
	if r.IsCanary(device) && !r.CanariesAt.IsZero() {
		return r.CanariesAt
	}
	if r.budgeted() {
		return r.handed[device]
	}
	if b := r.BatchOf(device); b > 0 {
		return r.batchStarted(b)
	}
	return r.ReleasedAt
}

// Terminal reports whether the rollout of the revision is over (Succeeded
// or Failed) or there is none to run (no revision, or deleted).
func (r Rollout) Terminal() bool {
	return r.UID == "" || r.Deleted || r.Stage == StageSucceeded || r.Stage == StageFailed
}

func without(s []string, x string) []string {
	out := make([]string, 0, len(s))
	for _, v := range s {
		if v != x {
			out = append(out, v)
		}
	}
	return out
}

// withEarly returns a copy of r with fn applied to the early facts of
// (uid, gen); inPlace (Fold) changes r's own facts instead of copying them,
// which makes a report folded before its revision O(1) instead of
// O(reports folded early) (a rebuild reads the reports stream before the
// revisions).
func (r Rollout) withEarly(uid string, gen int64, inPlace bool, fn func(*earlyFacts)) Rollout {
	key := revKey{uid, gen}
	if inPlace {
		if r.early == nil {
			r.early = map[revKey]*earlyFacts{}
		}
		f := r.early[key]
		if f == nil {
			f = &earlyFacts{results: map[string]DeviceResult{}, failures: map[string]DeviceResult{}}
			r.early[key] = f
		}
		fn(f)
		return r
	}
	n := r
	n.early = make(map[revKey]*earlyFacts, len(r.early)+1)
	for k, f := range r.early {
		n.early[k] = f
	}
	old := n.early[key]
	f := &earlyFacts{results: map[string]DeviceResult{}, failures: map[string]DeviceResult{}}
	if old != nil {
		f.controls = old.controls
		f.stage, f.stageAt, f.releasedAll, f.progressAt = old.stage, old.stageAt, old.releasedAll, old.progressAt
		f.removed, f.canariesAt, f.releasedAt = old.removed, old.canariesAt, old.releasedAt
		f.members, f.follow = old.members, old.follow
		for k, v := range old.failures {
			f.failures[k] = v
		}
		for k, v := range old.results {
			f.results[k] = v
		}
	}
	fn(f)
	n.early[key] = f
	return n
}

// EarlyRevisions is how many revisions the fold holds early facts for
// (reports and transitions of revisions it has not folded yet). The fold
// itself keeps them all, because a rebuild may fold a Deployment's reports
// before its revisions; a runner that has caught up bounds what devices can
// add (operator.RolloutRunner).
func (r Rollout) EarlyRevisions() int { return len(r.early) }

// HasEarly reports whether the fold holds early facts of revision (uid,
// generation).
func (r Rollout) HasEarly(uid string, generation int64) bool {
	_, ok := r.early[revKey{uid, generation}]
	return ok
}

// IsCurrent reports whether (uid, generation) is the revision the fold is
// at.
func (r Rollout) IsCurrent(uid string, generation int64) bool {
	return r.UID == uid && r.Generation == generation
}

// noteFailure records res as the latest failure when it is one: the one of
// the greatest Order (stream order, never the device's clock). Early
// failures are merged in any order, so the Order decides, not the call
// order.
func (r *Rollout) noteFailure(device string, res DeviceResult) {
	if res.Phase != events.WorkloadFailed {
		return
	}
	if r.LastFailure == nil || res.Order >= r.lastFailOrder {
		r.LastFailure = &events.RolloutTransition{Device: device, Error: res.Error}
		r.LastFailAt, r.lastFailOrder = res.Since, res.Order
	}
}

// Deadline is the revision's progress deadline: its own, else def (the
// operator's; 0 or less: none).
func (r Rollout) Deadline(def time.Duration) time.Duration {
	if r.ProgressDeadline > 0 {
		return r.ProgressDeadline
	}
	return max(def, 0)
}

// DeadlineExceeded reports whether the rollout has made no progress for its
// progress deadline (Deadline(def)) at now, the operator's time: it is not
// over, not paused, awaits no approval, soaks no batch, and now is at or
// after ProgressAt plus the deadline. The zero now, or no deadline, is
// never exceeded. It decides nothing: it is the Progressing condition's,
// the gauge's and the alert's.
func (r Rollout) DeadlineExceeded(now time.Time, def time.Duration) bool {
	d := r.Deadline(def)
	if d <= 0 || now.IsZero() || r.ProgressAt.IsZero() || r.Terminal() || r.Paused || r.AwaitingApproval > 0 || !r.SoakEnds().IsZero() {
		return false
	}
	at := r.ProgressAt
	if r.Window != nil {
		// Targets waiting for their window hold the clock; a window that
		// opened restarts it (ADR 0029).
		held, opened := r.windowClock(now)
		if held {
			return false
		}
		at = later(at, opened)
	}
	return !now.Before(at.Add(d))
}

// TargetTimeoutFrom is when the target timeout of device, a target of
// the revision, starts running: when it was handed the revision, or, for
// a target that waits for the revision's maintenance window, when the
// window opens (WindowOpensOf; ADR 0029): the wait is the plan's, not the
// device's. Zero: device is no target, or was not handed it yet. The
// operator's runner removes a target silent for its timeout from then;
// the what-if simulator (history) times a target's answer from then.
func (r Rollout) TargetTimeoutFrom(device string) time.Time {
	if !r.IsTarget(device) {
		return time.Time{}
	}
	at := r.HandedAt(device)
	if opens := r.WindowOpensOf(device); !at.IsZero() && opens.After(at) {
		return opens
	}
	return at
}

// WaitingTarget is a target handed the revision without a result of it
// (Converged or Failed), and its latest report (the zero Result: none).
type WaitingTarget struct {
	Device string
	Result DeviceResult
}

// Waiting lists up to limit targets handed the revision that have no
// result (Converged or Failed) of it, in device-id order, and how many
// there are. O(targets handed).
func (r Rollout) Waiting(limit int) ([]WaitingTarget, int) {
	var ids []string
	for _, d := range r.Released() {
		if !finished(r.Results[d].Phase) {
			ids = append(ids, d)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]WaitingTarget, 0, min(limit, len(ids)))
	for _, d := range ids[:min(limit, len(ids))] {
		out = append(out, WaitingTarget{Device: d, Result: r.Results[d]})
	}
	return out, len(ids)
}

// progress moves the progress clock to t when t is later.
func (r *Rollout) progress(t time.Time) {
	if t.After(r.ProgressAt) {
		r.ProgressAt = t
	}
}

// newer reports whether (uid, generation) is a later revision than r's.
func (r Rollout) newer(uid string, generation int64) bool {
	if r.UID == "" {
		return true
	}
	if uid != r.UID {
		return true // the Deployment was recreated under the same name
	}
	return generation > r.Generation
}

// stageRank orders the stages; a fold only ever moves forward, so a
// transition folded again (a runner's own append read back, a duplicate) or
// late never moves a rollout back.
var stageRank = map[Stage]int{StageNone: 0, StageStarted: 1, StageCanary: 2, StageCanariesConverged: 3,
	StageBatches: 4, StageReleased: 5, StageSucceeded: 6, StageFailed: 6}

func stageAfter(t events.Type, cur Stage) Stage {
	next := map[events.Type]Stage{
		events.TypeRolloutStarted:           StageStarted,
		events.TypeRolloutCanaryStage:       StageCanary,
		events.TypeRolloutCanariesConverged: StageCanariesConverged,
		events.TypeRolloutReleased:          StageReleased,
		events.TypeRolloutSucceeded:         StageSucceeded,
		events.TypeRolloutFailed:            StageFailed,
	}[t]
	if next == "" || stageRank[next] <= stageRank[cur] {
		return cur // canary-failed is followed by failed; terminal stays
	}
	return next
}

// Counts are the revision's counts of its targets' latest results.
func (r Rollout) Counts() events.RolloutCounts {
	if r.countsOK {
		return r.counts
	}
	return r.computeCounts()
}

// tally moves one target of phase (the zero phase: no report yet) in or
// out (delta ±1) of its bucket of c, as computeCounts buckets it.
func tally(c *events.RolloutCounts, phase events.WorkloadPhase, canary bool, delta int) {
	switch phase {
	case events.WorkloadConverged:
		c.Succeeded += delta
		if canary {
			c.CanariesSucceeded += delta
		}
	case events.WorkloadFailed:
		c.Failed += delta
		if canary {
			c.CanariesFailed += delta
		}
	default:
		c.Pending += delta
	}
}

// computeCounts counts from the results: O(targets).
func (r Rollout) computeCounts() events.RolloutCounts {
	c := events.RolloutCounts{Total: len(r.Targets), Canaries: len(r.Canaries)}
	for _, f := range r.Followers {
		if f.HandedGeneration == 0 {
			c.Followers++ // a follower handed another revision is no target
		}
	}
	for _, d := range r.Targets {
		switch r.Results[d].Phase {
		case events.WorkloadConverged:
			c.Succeeded++
			if r.IsCanary(d) {
				c.CanariesSucceeded++
			}
		case events.WorkloadFailed:
			c.Failed++
			if r.IsCanary(d) {
				c.CanariesFailed++
			}
		default:
			c.Pending++
		}
	}
	return c
}

// Released lists the targets that have been handed the revision: nobody
// before the rollout starts, the canaries from the canary stage on, every
// target once released. A failed canary stage never releases the rest, and
// nothing released is ever taken back (no rollback).
func (r Rollout) Released() []string {
	switch {
	case r.budgeted():
		var out []string
		if r.Stage != StageNone && r.Stage != StageStarted {
			out = slices.Clone(r.Canaries)
		}
		for _, d := range r.Targets {
			if _, ok := r.handed[d]; ok {
				out = append(out, d)
			}
		}
		return out
	case r.ReleasedAll:
		return r.Targets
	case r.planned() && r.Batch > 0:
		out := slices.Clone(r.Canaries)
		for _, d := range r.Targets {
			if b := r.BatchOf(d); b > 0 && b <= r.Batch {
				out = append(out, d)
			}
		}
		return out
	case r.Stage == StageNone || r.Stage == StageStarted:
		return nil
	}
	return r.Canaries
}

// Next returns the transitions to append, in order, given the state: the
// decision half of the state machine. It is empty when nothing is to be
// decided. Appending them and folding them back in with Apply reaches a
// state whose Next is empty or the following decision.
//
// Next never ends a plan batch's soak; the runner uses NextAt.
func (r Rollout) Next() []events.RolloutTransition { return r.NextAt(time.Time{}) }

// NextAt is Next at the operator's time now, which ends the soak of a plan
// batch (SoakEnds says when).
func (r Rollout) NextAt(now time.Time) []events.RolloutTransition {
	if r.Follow && r.Stage == StageSucceeded && r.budgeted() && !r.Deleted {
		return r.followerWaves()
	}
	if r.UID == "" || r.Deleted || r.Stage == StageSucceeded || r.Stage == StageFailed {
		return nil
	}
	mk := func(t events.Type, released []string, fail *events.RolloutTransition) events.RolloutTransition {
		d := events.RolloutTransition{UID: r.UID, Generation: r.Generation, RevisionID: r.RevisionID, Counts: r.Counts(), Released: released}
		if fail != nil {
			d.Device, d.Error = fail.Device, fail.Error
		}
		return events.NewRolloutTransition(t, d)
	}
	mkPlan := func(t events.Type, d events.RolloutTransition) events.RolloutTransition {
		d.UID, d.Generation, d.RevisionID, d.Counts = r.UID, r.Generation, r.RevisionID, r.Counts()
		return events.NewRolloutTransition(t, d)
	}
	var out []events.RolloutTransition
	stage := r.Stage
	if stage == StageNone {
		out = append(out, mk(events.TypeRolloutStarted, nil, nil))
		stage = StageStarted
	}
	if len(r.Targets) == 0 {
		// Nothing can converge: the revision fails, saying why, rather
		// than succeed with nothing deployed (no target from the start, or
		// every one removed). Devices that appear later are not in it; the
		// next generation resolves again.
		return append(out, mk(events.TypeRolloutFailed, nil, &events.RolloutTransition{Error: NoTargetsError}))
	}
	c := r.Counts()
	if r.Paused && (stage == StageStarted || stage == StageCanariesConverged) {
		return out // a pause holds every handing of the revision
	}
	if stage == StageStarted {
		if len(r.Canaries) > 0 {
			canaries := r.Canaries
			if !CanariesListed(canaries) {
				canaries = nil // every frozen canary not removed (ADR 0010, addendum)
			}
			out = append(out, mk(events.TypeRolloutCanaryStage, canaries, nil))
			stage = StageCanary
		} else if r.planned() {
			return append(out, r.nextBatches(now, mkPlan)...)
		} else {
			all := r.Targets
			if idBytes(all) > events.ChunkBytes {
				all = nil // every frozen target, as below
			}
			out = append(out, mk(events.TypeRolloutReleased, all, nil))
			stage = StageReleased
		}
	}
	if stage == StageBatches {
		return append(out, r.nextBatches(now, mkPlan)...)
	}
	if stage == StageCanary {
		if c.CanariesFailed > 0 {
			f := r.failure(true)
			out = append(out, mk(events.TypeRolloutCanaryFailed, nil, f))
			return append(out, r.failOrRollBack(mkPlan, *f, nil)...)
		}
		if len(r.Canaries) == 0 {
			// Every canary was removed: the rest is never released
			// without a converged canary still in the revision.
			f := &events.RolloutTransition{Error: NoCanariesError}
			return append(out, mk(events.TypeRolloutCanaryFailed, nil, f), mk(events.TypeRolloutFailed, nil, f))
		}
		if c.CanariesSucceeded == c.Canaries {
			out = append(out, mk(events.TypeRolloutCanariesConverged, nil, nil))
			stage = StageCanariesConverged
		}
	}
	if stage == StageCanariesConverged && r.Paused {
		return out
	}
	if stage == StageCanariesConverged && r.planned() {
		return append(out, r.nextBatches(now, mkPlan)...)
	}
	if stage == StageCanariesConverged {
		rest := make([]string, 0, len(r.Targets)-len(r.Canaries))
		for _, d := range r.Targets {
			if !r.IsCanary(d) {
				rest = append(rest, d)
			}
		}
		if idBytes(rest) > events.ChunkBytes {
			// rollout.released hands the revision to every frozen target;
			// a list too large for one event is left out.
			rest = nil
		}
		out = append(out, mk(events.TypeRolloutReleased, rest, nil))
		stage = StageReleased
	}
	if stage == StageReleased {
		switch {
		case c.Failed > 0:
			out = append(out, mk(events.TypeRolloutFailed, nil, r.failure(false)))
		case c.Succeeded == c.Total:
			out = append(out, mk(events.TypeRolloutSucceeded, nil, nil))
		}
	}
	return out
}

// failure returns the latest failure in stream order, among canaries only
// if canariesOnly.
func (r Rollout) failure(canariesOnly bool) *events.RolloutTransition {
	var best *events.RolloutTransition
	var order uint64
	for _, d := range r.Targets {
		res := r.Results[d]
		if res.Phase != events.WorkloadFailed || (canariesOnly && !r.IsCanary(d)) {
			continue
		}
		if best == nil || res.Order >= order {
			best = &events.RolloutTransition{Device: d, Error: res.Error}
			order = res.Order
		}
	}
	return best
}

// NoTargetsError is the error of the rollout.failed transition of a
// revision without frozen targets.
const NoTargetsError = "the revision has no targets"

// NoCanariesError is the error of the canary-failed and failed transitions
// of a revision whose canaries were all removed from its accounting.
const NoCanariesError = "every canary was removed from the revision (deleted, quarantined or no result in time): the rest is not released without a converged canary"

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

func maps(m map[string]DeviceResult) map[string]DeviceResult {
	out := make(map[string]DeviceResult, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// idBytes is about how many bytes ids take in an event's JSON.
func idBytes(ids []string) int {
	n := 0
	for _, id := range ids {
		n += len(id) + 3
	}
	return n
}
