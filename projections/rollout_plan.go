// The rollout plan's half of the fold (ADR 0016): batches after the canary
// stage with success thresholds and soak times, manual approval, pause and
// resume. A revision without a plan never reaches this code except for
// pause and resume, which hold the spec's releases too.

package projections

import (
	"fmt"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// StageBatches is a revision with a plan releasing its batches, after the
// canary stage (or at once, without canaries).
const StageBatches Stage = "Batches"

// BatchState is where one batch of a revision's plan is. Times are the
// operator's, from the transitions' events.
type BatchState struct {
	// Started is the time of the batch's rollout.batch-started (zero: not
	// started).
	Started time.Time `json:"started,omitzero"`
	// Soaking is the time of its rollout.batch-soaking (zero: not soaking).
	Soaking time.Time `json:"soaking,omitzero"`
	// Succeeded and Failed: the batch ended (rollout.batch-succeeded,
	// rollout.batch-failed).
	Succeeded bool `json:"succeeded,omitempty"`
	Failed    bool `json:"failed,omitempty"`
	// Approved is set by rollout.approved, when the plan asks for
	// approval; ApprovedBy is who approved.
	Approved   bool   `json:"approved,omitempty"`
	ApprovedBy string `json:"approvedBy,omitempty"`
}

// Done reports whether the batch ended, succeeded or failed.
func (b BatchState) Done() bool { return b.Succeeded || b.Failed }

// BatchTally counts one batch's current members (frozen targets not
// removed) by their latest result.
type BatchTally struct {
	Members, Converged, Failed int
}

// Need is how many members must converge for the batch to succeed:
// percent of the members, rounded up.
func (t BatchTally) Need(percent int) int {
	return (t.Members*percent + 99) / 100
}

// planned reports whether the revision has a rollout plan.
func (r Rollout) planned() bool { return r.Plan != nil && len(r.Plan.Batches) > 0 }

// BatchOf returns the plan batch (1-based) of a non-canary target, 0 for a
// canary, a device that is no target, or a revision without a plan.
func (r Rollout) BatchOf(device string) int {
	if !r.planned() || !r.IsTarget(device) || r.IsCanary(device) {
		return 0
	}
	return r.batchOf[device]
}

// batchIndex resolves the frozen batch of every non-canary target from the
// revision's TargetBatches (aligned with its Targets). An entry out of
// range, a missing one, or 0 for a device that is no canary puts the device
// in the plan's last batch: it is never released earlier than planned.
func batchIndex(d events.DeploymentRevisionCreated, canaries []string) map[string]int {
	n := len(d.Plan.Batches)
	out := make(map[string]int, len(d.Targets))
	for i, dev := range d.Targets {
		if _, canary := slices.BinarySearch(canaries, dev); canary {
			continue
		}
		b := n
		if i < len(d.TargetBatches) && d.TargetBatches[i] >= 1 && d.TargetBatches[i] <= n {
			b = d.TargetBatches[i]
		}
		if prev, ok := out[dev]; !ok || b > prev {
			out[dev] = b
		}
	}
	return out
}

// budgeted reports whether the revision's plan has a disruption budget.
func (r Rollout) budgeted() bool { return r.planned() && r.Plan.Budget != nil }

// groupIndex resolves every target's budget group from the revision's
// TargetGroups (aligned with its Targets); an entry out of range or missing
// puts the target in the group of targets without the label. extra is how
// many groups of values the plan does not know follow that one (a
// snapshot's followers, ADR 0026; 0 for a revision).
func groupIndex(d events.DeploymentRevisionCreated, extra int) map[string]int {
	none := len(d.Plan.Budget.Values)
	out := make(map[string]int, len(d.Targets))
	for i, dev := range d.Targets {
		g := none
		if i < len(d.TargetGroups) && d.TargetGroups[i] >= 0 && d.TargetGroups[i] <= none+extra {
			g = d.TargetGroups[i]
		}
		out[dev] = g
	}
	return out
}

// budgetCache is the disruption budget's bookkeeping for a fold folded in
// place (the runner's): per group, its targets and those handed the
// revision and not yet Converged or Failed; per batch and group, the
// members in device-id order and how many of them lead the list handed (or
// removed). It makes a decision O(groups + devices handed) instead of
// O(targets). A copying fold computes the same from scratch (wave).
type budgetCache struct {
	size, inflight []int
	lists          map[batchGroup][]string
	cursor         map[batchGroup]int
}

type batchGroup struct{ batch, group int }

func (r Rollout) newBudgetCache() *budgetCache {
	groups := len(r.Plan.Budget.Values) + 1 + len(r.budgetExtra)
	c := &budgetCache{size: make([]int, groups), inflight: make([]int, groups), lists: map[batchGroup][]string{}, cursor: map[batchGroup]int{}}
	for _, d := range r.Targets {
		g := r.groupOf[d]
		c.size[g]++
		if _, ok := r.handed[d]; ok && !finished(r.Results[d].Phase) {
			c.inflight[g]++
		}
		if b := r.BatchOf(d); b > 0 {
			k := batchGroup{b, g}
			c.lists[k] = append(c.lists[k], d)
		}
	}
	for k := range c.lists {
		c.advance(r, k)
	}
	return c
}

// advance moves k's cursor past the members handed the revision or no
// longer targets.
func (c *budgetCache) advance(r Rollout, k batchGroup) {
	l, i := c.lists[k], c.cursor[k]
	for i < len(l) {
		if _, ok := r.handed[l[i]]; !ok && r.IsTarget(l[i]) {
			break
		}
		i++
	}
	c.cursor[k] = i
}

// hand counts dev, just handed the revision.
func (c *budgetCache) hand(r Rollout, dev string) {
	g := r.groupOf[dev]
	if !finished(r.Results[dev].Phase) {
		c.inflight[g]++
	}
	c.advance(r, batchGroup{r.BatchOf(dev), g})
}

// report counts a target's report moving it from phase prev to next.
func (c *budgetCache) report(r Rollout, dev string, prev, next events.WorkloadPhase) {
	if _, ok := r.handed[dev]; !ok {
		return
	}
	g := r.groupOf[dev]
	if !finished(prev) {
		c.inflight[g]--
	}
	if !finished(next) {
		c.inflight[g]++
	}
}

// finished: a device with this latest phase is no longer between
// revisions.
func finished(p events.WorkloadPhase) bool {
	return p == events.WorkloadConverged || p == events.WorkloadFailed
}

// allowance is how many of a group of size targets may be between
// revisions at once: at least one.
func (r Rollout) allowance(size int) int {
	bud := r.Plan.Budget
	allowed := bud.MaxUnavailable
	if bud.MaxPercent > 0 {
		allowed = size * bud.MaxPercent / 100
	}
	return max(allowed, 1)
}

// waveAfter lists the members of batch b the budget lets the runner hand the
// revision to now: per group, up to its allowance minus the targets of the
// group handed and not yet Converged or Failed, in device-id order.
//
// waveAfter is that wave once the devices used counts per group (nil:
// none) are handed too, adding the devices it lists to used; with
// followersOnly, of the batch's followers only (ADR 0026).
func (r Rollout) waveAfter(b int, used []int, followersOnly bool) []string {
	c := r.budgetView()
	var out []string
	for g := range c.size {
		free := r.allowance(c.size[g]) - c.inflight[g]
		if used != nil {
			free -= used[g]
		}
		k := batchGroup{b, g}
		l := c.lists[k]
		for i := c.cursor[k]; i < len(l) && free > 0; i++ {
			if _, ok := r.handed[l[i]]; ok || !r.IsTarget(l[i]) {
				continue
			}
			if _, ok := r.joined[l[i]]; followersOnly && !ok {
				continue
			}
			out = append(out, l[i])
			free--
			if used != nil {
				used[g]++
			}
		}
	}
	slices.Sort(out)
	return out
}

// followerBacklog hands, within the budget, the followers of a Follow
// revision (ADR 0026) whose batch started before the running one (or is
// the running one, ended already) and who were not handed the revision
// yet: a follower placed in a batch that is over waits for no later
// batch. One rollout.batch-started per such batch (and chunk), as the
// running batch's waves are; used counts, per group, the devices they
// hand, for the waves decided after them. Only a Follow revision with a
// budget has any (without one, such a follower is handed the revision by
// its rollout.target-added).
func (r Rollout) followerBacklog(upTo int, used []int, mk func(events.Type, events.RolloutTransition) events.RolloutTransition) (out []events.RolloutTransition, handed []string) {
	if !r.Follow || !r.budgeted() || r.Paused || len(r.Followers) == 0 {
		return nil, nil
	}
	for b := 1; b <= upTo && b <= len(r.Batches); b++ {
		if b == r.Batch && !r.Batches[b-1].Done() && r.Stage != StageSucceeded {
			continue // the running batch's own waves hand them
		}
		w := r.waveAfter(b, used, true)
		for _, c := range chunkIDs(w) {
			out = append(out, mk(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: b, Released: c}))
		}
		handed = append(handed, w...)
	}
	return out, handed
}

// budgetUsed is a count per budget group, for waveAfter.
func (r Rollout) budgetUsed() []int { return make([]int, len(r.budgetView().size)) }

// unhanded counts the members of batch b not handed the revision yet.
func (r Rollout) unhanded(b int) int {
	c := r.budgetView()
	n := 0
	for g := range c.size {
		k := batchGroup{b, g}
		for _, d := range c.lists[k][c.cursor[k]:] {
			if _, ok := r.handed[d]; !ok && r.IsTarget(d) {
				n++
			}
		}
	}
	return n
}

// budgetView is the budget's bookkeeping: the fold's own when it folds in
// place, else counted now (O(targets)).
func (r Rollout) budgetView() *budgetCache {
	if r.budget != nil {
		return r.budget
	}
	return r.newBudgetCache()
}

// BatchTallies counts every batch's members by result, in plan order.
func (r Rollout) BatchTallies() []BatchTally {
	if !r.planned() {
		return nil
	}
	if r.talliesOK {
		return r.tallies
	}
	return r.computeTallies()
}

func (r Rollout) computeTallies() []BatchTally {
	out := make([]BatchTally, len(r.Plan.Batches))
	for _, d := range r.Targets {
		b := r.BatchOf(d)
		if b == 0 {
			continue
		}
		t := &out[b-1]
		t.Members++
		switch r.Results[d].Phase {
		case events.WorkloadConverged:
			t.Converged++
		case events.WorkloadFailed:
			t.Failed++
		}
	}
	return out
}

// tallyBatch moves a member of batch b from phase prev to phase next.
func tallyBatch(ts []BatchTally, b int, prev, next events.WorkloadPhase) {
	if b < 1 || b > len(ts) {
		return
	}
	t := &ts[b-1]
	for _, x := range []struct {
		p events.WorkloadPhase
		d int
	}{{prev, -1}, {next, +1}} {
		switch x.p {
		case events.WorkloadConverged:
			t.Converged += x.d
		case events.WorkloadFailed:
			t.Failed += x.d
		}
	}
}

// HasRequest reports whether an approval, pause or resume with this request
// id was folded for the revision.
func (r Rollout) HasRequest(id string) bool { return r.requests[id] }

// applyControl folds the plan's transitions and pause and resume into a
// copy of r (in place when inPlace). Transitions that do not apply (an
// approval of a batch that is not next, a resume of a rollout not paused, a
// batch transition of another batch than the one running) are kept in the
// log and change nothing.
func (r Rollout) applyControl(ev *events.Event, d events.RolloutTransition, inPlace bool) Rollout {
	n := r
	if !inPlace {
		n.Batches = slices.Clone(r.Batches)
		if ev.Type == events.TypeRolloutBatchStarted && r.handed != nil {
			n.handed = make(map[string]time.Time, len(r.handed)+len(d.Released))
			for k, v := range r.handed {
				n.handed[k] = v
			}
		}
		if r.requests != nil {
			n.requests = make(map[string]bool, len(r.requests)+1)
			for k := range r.requests {
				n.requests[k] = true
			}
		}
	}
	if d.Request != "" {
		if n.requests == nil {
			n.requests = map[string]bool{}
		}
		n.requests[d.Request] = true
	}
	switch ev.Type {
	case events.TypeRolloutRolledBack:
		if n.RolledBackTo == 0 && d.RollbackTo > 0 {
			n.RolledBackTo = d.RollbackTo
		}
		return n
	case events.TypeRolloutPaused:
		if !n.Paused && !n.Terminal() {
			n.Paused, n.PausedBy, n.PauseReason = true, d.By, d.Error
		}
		return n
	case events.TypeRolloutResumed:
		if n.Paused {
			n.Paused, n.PausedBy, n.PauseReason = false, "", ""
		}
		return n
	}
	b := d.Batch
	if !n.planned() || b < 1 || b > len(n.Batches) {
		return n
	}
	st := &n.Batches[b-1]
	switch ev.Type {
	case events.TypeRolloutAwaitingApproval:
		if b == n.Batch+1 && !st.Approved {
			n.AwaitingApproval = b
		}
	case events.TypeRolloutApproved:
		// An approval counts for the next batch only: one that waits, or
		// one whose predecessor is still running.
		if b == n.Batch+1 && !st.Approved {
			st.Approved, st.ApprovedBy = true, d.By
			if n.AwaitingApproval == b {
				n.AwaitingApproval = 0
			}
		}
	case events.TypeRolloutBatchStarted:
		if n.budgeted() && (b == n.Batch || b == n.Batch+1 || (n.Follow && b < n.Batch)) {
			// A batch is handed in waves: each start lists the devices
			// it hands the revision to. A wave of a batch before the
			// running one hands a Follow revision's followers only
			// (followerBacklog, ADR 0026).
			for _, dev := range d.Released {
				if _, follower := n.joined[dev]; n.BatchOf(dev) == b && (b >= n.Batch || follower) {
					if _, ok := n.handed[dev]; !ok {
						n.handed[dev] = ev.Time
						if inPlace && n.budget != nil {
							n.budget.hand(n, dev)
						}
					}
				}
			}
		}
		if b == n.Batch+1 {
			n.Batch, st.Started = b, ev.Time
			n.AwaitingApproval = 0
			if stageRank[n.Stage] < stageRank[StageBatches] {
				n.Stage, n.StageAt = StageBatches, ev.Time
			}
			if b == len(n.Batches) && !n.budgeted() {
				n.ReleasedAll = true
				if n.ReleasedAt.IsZero() {
					n.ReleasedAt = ev.Time
				}
			}
		}
	case events.TypeRolloutBatchSoaking:
		if b == n.Batch && !st.Done() && st.Soaking.IsZero() {
			st.Soaking = ev.Time
		}
	case events.TypeRolloutBatchSucceeded:
		if b == n.Batch && !st.Done() {
			st.Succeeded = true
		}
	case events.TypeRolloutBatchFailed:
		if b == n.Batch && !st.Done() {
			st.Failed = true
		}
	}
	return n
}

// planControl reports whether t is one of the plan's transitions or pause
// and resume (folded by applyControl).
func planControl(t events.Type) bool {
	switch t {
	case events.TypeRolloutBatchStarted, events.TypeRolloutBatchSoaking, events.TypeRolloutBatchSucceeded,
		events.TypeRolloutBatchFailed, events.TypeRolloutAwaitingApproval, events.TypeRolloutApproved,
		events.TypeRolloutPaused, events.TypeRolloutResumed, events.TypeRolloutRolledBack:
		return true
	}
	return false
}

// batchMembers lists batch b's current members, sorted.
func (r Rollout) batchMembers(b int) []string {
	var out []string
	for _, d := range r.Targets {
		if r.BatchOf(d) == b {
			out = append(out, d)
		}
	}
	return out
}

// nextBatches decides the plan's transitions once the canaries (if any)
// converged: each batch in order is approved when the plan asks, started,
// judged against its threshold, soaked, and ended; after the last one the
// rollout succeeds. now ends soaks (the zero time never does). mk builds a
// transition of the current counts.
func (r Rollout) nextBatches(now time.Time, mk func(events.Type, events.RolloutTransition) events.RolloutTransition) []events.RolloutTransition {
	var out []events.RolloutTransition
	tallies := r.BatchTallies()
	batch, states := r.Batch, slices.Clone(r.Batches)
	started := false       // a batch was started by this decision
	var handedNow []string // devices this decision hands the revision to
	var used []int         // with a budget: per group, the devices handed by this decision's follower backlog
	if r.Follow && r.budgeted() {
		used = r.budgetUsed()
		backlog, h := r.followerBacklog(batch, used, mk)
		out, handedNow = append(out, backlog...), h
	}
	for {
		if batch > 0 && !states[batch-1].Done() && r.budgeted() && !r.Paused && !started {
			// The next wave of the running batch, as far as the budget
			// lets it.
			for _, w := range chunkIDs(r.waveAfter(batch, used, false)) {
				out = append(out, mk(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: batch, Released: w}))
				handedNow = append(handedNow, w...)
			}
		}
		if batch > 0 && !states[batch-1].Done() {
			st, t, pb := &states[batch-1], tallies[batch-1], r.Plan.Batches[batch-1]
			need := t.Need(pb.SuccessPercent)
			switch {
			case t.Members-t.Failed < need:
				f := r.batchFailure(batch)
				out = append(out, mk(events.TypeRolloutBatchFailed, events.RolloutTransition{Batch: batch, Device: f.Device,
					Error: fmt.Sprintf("batch %d: %d of %d failed, at most %d may fail (success threshold %d%%): %s",
						batch, t.Failed, t.Members, t.Members-need, pb.SuccessPercent, f.Error)}))
				last := out[len(out)-1]
				if r.Plan.OnFailure == events.OnFailurePause {
					if !r.Paused {
						out = append(out, mk(events.TypeRolloutPaused, events.RolloutTransition{Device: last.Device, Error: last.Error}))
					}
					return out
				}
				return append(out, r.failOrRollBack(mk, events.RolloutTransition{Device: last.Device, Error: last.Error}, handedNow)...)
			case t.Converged < need:
				return out // waits for more results
			case pb.SoakSeconds > 0 && st.Soaking.IsZero():
				return append(out, mk(events.TypeRolloutBatchSoaking, events.RolloutTransition{Batch: batch}))
			case pb.SoakSeconds > 0 && (now.IsZero() || now.Before(st.Soaking.Add(time.Duration(pb.SoakSeconds)*time.Second))):
				return out // soaking
			}
			out = append(out, mk(events.TypeRolloutBatchSucceeded, events.RolloutTransition{Batch: batch}))
			st.Succeeded = true
		}
		if batch == len(states) {
			if states[batch-1].Failed && r.Paused {
				return out // paused by the failure, or before it: a resume ends it
			}
			if states[batch-1].Failed {
				// Resumed past a failed last batch: nothing is left to
				// release, and the last batch did not succeed.
				f := r.batchFailure(batch)
				return append(out, mk(events.TypeRolloutFailed, events.RolloutTransition{Device: f.Device,
					Error: fmt.Sprintf("the last batch (%d) failed: %s", batch, f.Error)}))
			}
			return append(out, mk(events.TypeRolloutSucceeded, events.RolloutTransition{}))
		}
		next := batch + 1
		if r.Paused {
			return out
		}
		if r.Plan.Approval == events.ApprovalManual && !states[next-1].Approved {
			if r.AwaitingApproval != next {
				out = append(out, mk(events.TypeRolloutAwaitingApproval, events.RolloutTransition{Batch: next}))
			}
			return out
		}
		if r.budgeted() {
			w := r.waveAfter(next, used, false)
			if len(w) == 0 && r.unhanded(next) > 0 {
				return out // every group of the batch is at its budget: wait
			}
			for _, c := range chunkIDs(w) {
				out = append(out, mk(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: next, Released: c}))
			}
			handedNow = append(handedNow, w...)
			if len(w) == 0 {
				// No member left (all removed): the start without a list
				// hands nothing, as readers expand it to the members not
				// removed before it.
				out = append(out, mk(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: next}))
			}
			started = true
		} else {
			members := r.batchMembers(next)
			handedNow = append(handedNow, members...)
			if idBytes(members) > events.ChunkBytes {
				members = nil // readers take the batch from the revision's targetBatches
			}
			out = append(out, mk(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: next, Released: members}))
		}
		batch = next
		states[next-1].Started = now
	}
}

// followerWaves hands the revision of a Follow revision whose rollout
// succeeded to its followers not handed it yet (ADR 0026), within the
// disruption budget: a rollout.batch-started of the last batch per wave,
// as the running batch's waves are.
func (r Rollout) followerWaves() []events.RolloutTransition {
	mk := func(t events.Type, d events.RolloutTransition) events.RolloutTransition {
		d.UID, d.Generation, d.RevisionID, d.Counts = r.UID, r.Generation, r.RevisionID, r.Counts()
		return events.NewRolloutTransition(t, d)
	}
	// The followers of earlier batches (a selector batch their labels
	// match), then the last batch's.
	used := r.budgetUsed()
	out, _ := r.followerBacklog(len(r.Batches)-1, used, mk)
	for _, w := range chunkIDs(r.waveAfter(len(r.Batches), used, false)) {
		out = append(out, mk(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: len(r.Batches), Released: w}))
	}
	return out
}

// chunkIDs splits ids into lists that each fit in one event (none for no
// ids).
func chunkIDs(ids []string) [][]string {
	var out [][]string
	start, n := 0, 0
	for i, id := range ids {
		if n > 0 && n+len(id)+3 > events.ChunkBytes {
			out = append(out, ids[start:i])
			start, n = i, 0
		}
		n += len(id) + 3
	}
	if start < len(ids) {
		out = append(out, ids[start:])
	}
	return out
}

// batchFailure is the latest failure of batch b in stream order.
func (r Rollout) batchFailure(b int) events.RolloutTransition {
	var best events.RolloutTransition
	var order uint64
	found := false
	for _, d := range r.Targets {
		res := r.Results[d]
		if res.Phase != events.WorkloadFailed || r.BatchOf(d) != b {
			continue
		}
		if !found || res.Order >= order {
			best, order, found = events.RolloutTransition{Device: d, Error: res.Error}, res.Order, true
		}
	}
	if !found {
		best.Error = "members removed"
	}
	return best
}

// SoakEnds is when the running batch's soak ends (zero: none running).
// The runner decides again at that time.
func (r Rollout) SoakEnds() time.Time {
	if !r.planned() || r.Batch == 0 || r.Terminal() {
		return time.Time{}
	}
	st := r.Batches[r.Batch-1]
	if st.Done() || st.Soaking.IsZero() {
		return time.Time{}
	}
	return st.Soaking.Add(time.Duration(r.Plan.Batches[r.Batch-1].SoakSeconds) * time.Second)
}

// FirstHandedAt is the earliest time a target was handed the revision
// (zero: nobody yet): the canary stage, the first batch or the release.
func (r Rollout) FirstHandedAt() time.Time {
	first := r.CanariesAt
	for _, at := range []time.Time{r.ReleasedAt, r.batchStarted(1)} {
		if !at.IsZero() && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first
}

func (r Rollout) batchStarted(b int) time.Time {
	if !r.planned() || b < 1 || b > len(r.Batches) {
		return time.Time{}
	}
	return r.Batches[b-1].Started
}

// failOrRollBack ends a failed rollout: with onFailure Rollback and an
// earlier revision of this UID that succeeded, rollout.rolled-back hands it
// back to every device handed this revision (the list left out when it does
// not fit in one event: readers then take every device handed the
// revision), then rollout.failed says so; otherwise rollout.failed with
// the failure (and, asked to roll back, why it could not).
//
// handedNow are the devices the same decision hands the revision to before
// it fails (a batch started and failed at once).
func (r Rollout) failOrRollBack(mk func(events.Type, events.RolloutTransition) events.RolloutTransition, f events.RolloutTransition, handedNow []string) []events.RolloutTransition {
	if r.Plan == nil || r.Plan.OnFailure != events.OnFailureRollback {
		return []events.RolloutTransition{mk(events.TypeRolloutFailed, f)}
	}
	if r.LastSucceeded == 0 {
		f.Error += "; not rolled back: no earlier revision of this Deployment succeeded"
		return []events.RolloutTransition{mk(events.TypeRolloutFailed, f)}
	}
	handed := sortedCopy(append(r.Released(), handedNow...))
	if idBytes(handed) > events.ChunkBytes {
		handed = nil
	}
	back := mk(events.TypeRolloutRolledBack, events.RolloutTransition{RollbackTo: r.LastSucceeded, Released: handed, Device: f.Device, Error: f.Error})
	f.RollbackTo = r.LastSucceeded
	f.Error = fmt.Sprintf("rolled back to generation %d: %s", r.LastSucceeded, f.Error)
	return []events.RolloutTransition{back, mk(events.TypeRolloutFailed, f)}
}
