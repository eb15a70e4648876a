package rollouts

import (
	"context"
	"github.com/nationtech/harmony-fleet/operator/internal/follow"
	"maps"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// FollowChange is what the followers watch judged (operator/internal/follow).
type FollowChange = follow.Change

// DefaultFollowDebounce is RolloutRunner.FollowDebounce when zero.
const DefaultFollowDebounce = 30 * time.Second

// followWant is the latest FollowChange of one Device for one Deployment
// that the runner has not settled yet, and since when (the operator's
// clock) the device has not matched.
type followWant struct {
	FollowChange
	since time.Time
}

// noteFollow keeps ch as its device's latest change for its Deployment. A
// device that goes on not matching keeps the time it stopped matching: the
// debounce counts from there, not from its latest label change.
func (r *runner) noteFollow(ch FollowChange, now time.Time) depKey {
	k := depKey{ch.Namespace, ch.Deployment}
	m := r.follows[k]
	if m == nil {
		m = map[string]*followWant{}
		r.follows[k] = m
	}
	w := &followWant{FollowChange: ch, since: now}
	if old := m[ch.Device]; old != nil && !old.Match && !ch.Match {
		w.since = old.since
	}
	m[ch.Device] = w
	return k
}

// follow settles the follow changes of Deployment k at now (ADR 0026): a
// device that matches and is no target of the current revision joins it
// (rollout.target-added), unless the rollout failed (it is handed the
// Deployment's last revision whose rollout succeeded, if any) or is
// paused (on the resume); a target that does
// not match leaves it (rollout.target-removed marked Follow, which takes
// the revision back) at once for a deletion, a quarantine, a duplicate
// mark or a group, and after FollowDebounce of not matching for a label
// change. Each decision is the event appended, with the expected last
// sequence of the rollout subject; the debounce lives only here, so a
// rebuild folds the same events to the same state. A change of another
// generation waits for its revision (a newer one) or is dropped (an older
// one). Then the state machine decides again.
func (r *runner) follow(ctx context.Context, k depKey, now time.Time) {
	m := r.follows[k]
	if len(m) == 0 {
		return
	}
	ro := r.s.rollouts[k]
	if ro.UID == "" {
		return // the revision has not come yet
	}
	changed := false
	for _, dev := range slices.Sorted(maps.Keys(m)) {
		w := m[dev]
		if w.UID == ro.UID && w.Generation < ro.Generation {
			delete(m, dev) // judged against an older generation
			continue
		}
		if w.UID != ro.UID || w.Generation != ro.Generation {
			continue // for a revision still to come
		}
		if !ro.Follow || ro.Deleted {
			delete(m, dev)
			continue
		}
		target := ro.Holds(dev)
		var tr events.RolloutTransition
		switch {
		case w.Match && !target && ro.Paused && !ro.Terminal():
			continue // a pause holds every handing of the revision: it joins on the resume
		case w.Match && !target && ro.Stage != projections.StageFailed:
			tr = events.NewRolloutTransition(events.TypeRolloutTargetAdded, ro.PlaceFollower(events.RolloutTransition{
				Device: dev, Follow: true, Reason: w.Reason, Change: w.Change}, w.Labels))
		case w.Match && !target && ro.LastSucceeded > 0:
			// The rollout failed: the newcomer is handed the last
			// revision that succeeded, and the event says which.
			last, ok := r.s.intent.Revision(k.ns, k.name, ro.UID, ro.LastSucceeded)
			if !ok {
				delete(m, dev) // not in the fold (cannot happen once caught up)
				continue
			}
			tr = events.NewRolloutTransition(events.TypeRolloutTargetAdded, events.RolloutTransition{
				Device: dev, Follow: true, Reason: w.Reason, Change: w.Change,
				HandedGeneration: last.Generation, HandedRevisionID: last.RevisionID})
		case !w.Match && target && (w.Immediate || !now.Before(w.since.Add(r.FollowDebounce))):
			tr = events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{
				Device: dev, Follow: true, Error: w.Reason, Change: w.Change})
		case !w.Match && target:
			continue // debounced: decided again on a tick
		default:
			delete(m, dev) // nothing to do: it is where it should be
			continue
		}
		cur := r.s.rollouts[k]
		tr.UID, tr.Generation, tr.RevisionID, tr.Counts = cur.UID, cur.Generation, cur.RevisionID, cur.Counts()
		if !r.appendTransition(ctx, k, tr) {
			break // a conflict or an error: the next tick tries again
		}
		delete(m, dev)
		changed = true
		ro = r.s.rollouts[k]
	}
	if len(m) == 0 {
		delete(r.follows, k)
	}
	if changed {
		r.decide(ctx, k)
	}
}

// handUnhanded hands each follower of Deployment k's failed revision
// that was never handed it the Deployment's last revision that succeeded
// (ADR 0026), as a newcomer after the failure is: one rollout.target-added
// per follower with HandedGeneration and HandedRevisionID, appended with
// the expected last sequence of the rollout subject, so the fold stays a
// fold (projections.Rollout.UnhandedFollowers). Nothing for a Frozen
// revision, a rollout that did not fail, or without a revision that
// succeeded.
func (r *runner) handUnhanded(ctx context.Context, k depKey) {
	ro := r.s.rollouts[k]
	devs := ro.UnhandedFollowers()
	if len(devs) == 0 {
		return
	}
	last, ok := r.s.intent.Revision(k.ns, k.name, ro.UID, ro.LastSucceeded)
	if !ok {
		return // not in the fold (cannot happen once caught up)
	}
	for _, dev := range devs {
		cur := r.s.rollouts[k]
		tr := events.NewRolloutTransition(events.TypeRolloutTargetAdded, events.RolloutTransition{
			UID: cur.UID, Generation: cur.Generation, RevisionID: cur.RevisionID, Counts: cur.Counts(),
			Device: dev, Follow: true, Reason: projections.ReasonFailedBeforeHanded,
			HandedGeneration: last.Generation, HandedRevisionID: last.RevisionID})
		if !r.appendTransition(ctx, k, tr) {
			r.undecided[k] = true // decided again on the next tick
			return
		}
	}
}

// followAll settles the follow changes of every Deployment at now.
func (r *runner) followAll(ctx context.Context, now time.Time) {
	for _, k := range slices.SortedFunc(maps.Keys(r.follows), cmpKey) {
		r.follow(ctx, k, now)
	}
}
