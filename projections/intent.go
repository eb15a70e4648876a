package projections

import (
	"encoding/json"
	"iter"
	"slices"
	"strings"

	"github.com/nationtech/harmony-fleet/events"
)

// DeviceIntent and IntentEntry are the fleet-intent value format, defined
// by the event contract.
type (
	DeviceIntent = events.DeviceIntent
	IntentEntry  = events.IntentEntry
)

type depKey struct{ ns, name string }

// intentRev is what the fold knows of one revision.
type intentRev struct {
	known    bool // the revision event was folded
	order    int  // position of the revision event among this Deployment's
	entry    IntentEntry
	targets  map[string]bool
	released map[string]bool
	// releasedAll: a rollout.released without a list was folded (the
	// remaining targets did not fit in one event): it hands the revision
	// to every frozen target but those removed before it.
	releasedAll bool
	removed     map[string]bool
	deleted     bool // the Deployment (this UID) was deleted
	// With a rollout plan: each non-canary target's batch; the batches a
	// rollout.batch-started handed the revision to without listing them
	// (expanded once the revision is known); for each removed target, how
	// many batches had started when it was removed (a batch started later
	// is not handed to it).
	batchOf       map[string]int
	batches       int
	unlisted      []int
	removedAfterN map[string]int
	// rollbackTo is the generation a rollout.rolled-back of this revision
	// handed back to rolledBack (every device handed it, when
	// rolledBackAll).
	rollbackTo    int64
	rolledBack    map[string]bool
	rolledBackAll bool
	// releasedRest: a rollout.released was folded, so a device that joins
	// later (rollout.target-added) is handed the revision at once; left:
	// the devices that left a Follow revision (a rollout.target-removed
	// marked Follow), which hold nothing of the Deployment (ADR 0026).
	releasedRest bool
	left         map[string]bool
	// handedBack: the devices that joined the revision after its rollout
	// failed, and the generation they were handed instead (the
	// Deployment's last whose rollout succeeded).
	handedBack map[string]int64
	// joined: the devices that joined the revision (rollout.target-added);
	// a rollback hands them the revision rolled back to, as it does the
	// frozen targets that held it.
	joined map[string]bool
	// prefetch: the revision's targets may fetch its images before they
	// are handed it (ADR 0027, intent_fetch.go).
	prefetch bool
	// canaries is the frozen canary set, kept only when it is too long
	// for the canary stage to list (CanariesListed); canariesAll: a
	// rollout.canary-stage without a list was folded, handing the revision
	// to every frozen canary not removed before it; canaryRemoved: the
	// targets removed before it, kept until the revision is known (the
	// rollout stream was read first).
	canaries      []string
	canariesAll   bool
	canaryRemoved map[string]bool
	// fetchWindow is the revision's fetch window (ADR 0029), copied into
	// its fetch entries; nil: none.
	fetchWindow *events.MaintenanceWindow
}

// Intent folds FLEET_INTENT and FLEET_ROLLOUT events into every device's
// desired state. A device holds a Deployment's newest revision that was
// released to it, unless a newer revision no longer targets it or the
// Deployment was deleted; and the task of every TaskRun that froze it as a
// target, until that TaskRun is deleted (intent_tasks.go). Both kinds of
// entry live in the one value of the device, so neither path erases the
// other's entries. The answer depends only on the facts, not on how
// the two streams interleave, so a live projection and a rebuild from zero
// give byte-identical values.
//
// Intent is mutable (Apply changes it) for speed at fleet scale; it does no
// I/O. It is not safe for concurrent use.
type Intent struct {
	deps  map[depKey]map[revKey]*intentRev
	order map[depKey]int
	// devices: device → deployment → entry; the materialised values.
	devices map[string]map[depKey]IntentEntry
	// byDep: deployment → devices that appear in any of its revisions.
	byDep map[depKey]map[string]bool
	// holders: deployment → devices whose value holds one of its
	// revisions (the keys of devices with an entry for it).
	holders map[depKey]map[string]bool
	// tasks: TaskRun UID → what the fold knows of it; deviceTasks: device
	// → TaskRun → entry, the materialised task entries.
	tasks       map[taskKey]*intentTask
	deviceTasks map[string]map[taskKey]TaskEntry
	// live: deployment → its known revisions of UIDs not deleted, newest
	// first, as recomputeSome reads them; dropped when a revision becomes
	// known or a deletion is folded, built again on the next read.
	live map[depKey][]*intentRev
	// fetch: device → deployment → the revision it may fetch ahead
	// (intent_fetch.go); empty unless a revision asks for prefetch.
	fetch map[string]map[depKey]FetchEntry
}

// NewIntent returns an empty fold.
func NewIntent() *Intent {
	return &Intent{deps: map[depKey]map[revKey]*intentRev{}, order: map[depKey]int{},
		devices: map[string]map[depKey]IntentEntry{}, byDep: map[depKey]map[string]bool{}, holders: map[depKey]map[string]bool{},
		tasks: map[taskKey]*intentTask{}, deviceTasks: map[string]map[taskKey]TaskEntry{}}
}

func (s *Intent) rev(k depKey, rk revKey) *intentRev {
	revs := s.deps[k]
	if revs == nil {
		revs = map[revKey]*intentRev{}
		s.deps[k] = revs
	}
	r := revs[rk]
	if r == nil {
		r = &intentRev{targets: map[string]bool{}, released: map[string]bool{}}
		revs[rk] = r
	}
	return r
}

func (s *Intent) touch(k depKey, devices ...string) {
	m := s.byDep[k]
	if m == nil {
		m = map[string]bool{}
		s.byDep[k] = m
	}
	for _, d := range devices {
		m[d] = true
	}
}

// Apply folds one event and returns the devices whose value may have
// changed. Events of other families are ignored, and so is a revision that
// still names target chunks: feed revisions through an
// events.RevisionAssembler first.
func (s *Intent) Apply(ev events.Event) []string {
	p := NewPayload(ev)
	return s.ApplyPayload(&p)
}

// ApplyPayload is Apply of p's event, reading the data p decoded already (a
// revision or transition folded into a Rollout too is decoded once).
func (s *Intent) ApplyPayload(p *Payload) []string {
	ev := &p.Event
	if changed, ok := s.applyTask(p); ok {
		return changed
	}
	k := depKey{ev.Keys.Namespace, ev.Keys.Name}
	switch ev.Type {
	case events.TypeDeploymentRevisionCreated:
		d, err := p.RevisionCreated()
		if err != nil || d.TargetChunks > 0 {
			return nil // a chunked revision is folded once assembled (events.RevisionAssembler)
		}
		r := s.rev(k, revKey{d.UID, d.Generation})
		if r.known {
			return nil // duplicate
		}
		s.order[k]++
		r.known, r.order = true, s.order[k]
		delete(s.live, k)
		r.entry = IntentEntry{Namespace: k.ns, Name: k.name, UID: d.UID, Generation: d.Generation,
			RevisionID: d.RevisionID, ScoreDigest: d.ScoreDigest, Score: d.Score, MinReadySeconds: d.MinReadySeconds,
			Signatures: d.Signatures, Window: d.Window}
		r.prefetch, r.fetchWindow = d.Prefetch, d.FetchWindow
		for _, t := range d.Targets {
			r.targets[t] = true
		}
		s.touch(k, d.Targets...)
		if !CanariesListed(d.Canaries) {
			r.canaries = slices.Clone(d.Canaries)
			if r.canariesAll {
				r.releaseCanaries(r.canaryRemoved)
				r.canaryRemoved = nil
			}
		}
		if d.Plan != nil && len(d.Plan.Batches) > 0 {
			joined := r.batchOf // followers folded before the revision
			r.batchOf = batchIndex(d, sortedCopy(d.Canaries))
			for dev, b := range joined {
				if _, frozen := r.batchOf[dev]; !frozen {
					r.batchOf[dev] = b
				}
			}
			for _, b := range r.unlisted {
				r.releaseBatch(b)
			}
			r.unlisted = nil
		}
		// The newest revision changes only its targets and the devices
		// that hold a value of this Deployment (a device it does not
		// target loses the value; one that holds none keeps holding none).
		affected := slices.Clone(d.Targets)
		if len(r.targets) > len(d.Targets) {
			// Followers folded before the revision (a rebuild reads the
			// rollouts beside the intent).
			for dev := range r.targets {
				affected = append(affected, dev)
			}
		}
		for dev := range s.holders[k] {
			affected = append(affected, dev)
		}
		return s.recomputeDevices(k, affected)
	case events.TypeDeploymentDeleted:
		d, err := p.DeploymentDeleted()
		if err != nil {
			return nil
		}
		for rk, r := range s.deps[k] {
			if rk.uid == d.UID {
				r.deleted = true
			}
		}
		s.rev(k, revKey{d.UID, d.Generation}).deleted = true
		delete(s.live, k)
		return s.recompute(k)
	case events.TypeRolloutTargetAdded:
		// A device joined a Follow revision (ADR 0026): a target like
		// the frozen ones, handed the revision at once when the rest was
		// released already, else with the release.
		d, err := p.RolloutTransition()
		if err != nil || d.Device == "" {
			return nil
		}
		r := s.rev(k, revKey{d.UID, d.Generation})
		r.targets[d.Device] = true
		if r.joined == nil {
			r.joined = map[string]bool{}
		}
		r.joined[d.Device] = true
		delete(r.left, d.Device)
		delete(r.removed, d.Device)
		switch {
		case d.HandedGeneration > 0 && d.HandedGeneration < d.Generation:
			// The revision failed: the device is handed the last one
			// that succeeded instead, never this one.
			if r.handedBack == nil {
				r.handedBack = map[string]int64{}
			}
			r.handedBack[d.Device] = d.HandedGeneration
			delete(r.released, d.Device)
		case d.HandedGeneration > 0:
			return nil // not an older revision: a forged or broken event
		case d.Batch > 0:
			// A follower of a revision with a plan: handed the revision
			// with its batch, at once when the event says so (its batch
			// started already, no budget), else by the batch's start or
			// a budget wave that lists it.
			if r.batchOf == nil {
				r.batchOf = map[string]int{}
			}
			r.batchOf[d.Device] = d.Batch
			if slices.Contains(d.Released, d.Device) {
				r.released[d.Device] = true
			}
		case r.releasedRest:
			r.released[d.Device] = true
		}
		delete(s.live, k)
		s.touch(k, d.Device)
		return s.recomputeDevices(k, []string{d.Device})
	case events.TypeRolloutTargetRemoved:
		// Only a removal before a release without a list matters: it
		// keeps the device out of "every frozen target". A device that
		// left a Follow revision loses the Deployment's entry.
		d, err := p.RolloutTransition()
		if err != nil {
			return nil
		}
		r := s.rev(k, revKey{d.UID, d.Generation})
		if d.Follow {
			if r.left == nil {
				r.left = map[string]bool{}
			}
			r.left[d.Device] = true
			delete(r.released, d.Device)
			s.touch(k, d.Device)
			return s.recomputeDevices(k, []string{d.Device})
		}
		if !r.releasedAll {
			if r.removed == nil {
				r.removed = map[string]bool{}
			}
			r.removed[d.Device] = true
		}
		if _, seen := r.removedAfterN[d.Device]; !seen {
			if r.removedAfterN == nil {
				r.removedAfterN = map[string]int{}
			}
			r.removedAfterN[d.Device] = r.batches
		}
		if r.prefetch {
			return s.recomputeDevices(k, []string{d.Device}) // it no longer fetches the revision
		}
		return nil
	case events.TypeRolloutRolledBack:
		d, err := p.RolloutTransition()
		if err != nil || d.RollbackTo <= 0 || d.RollbackTo >= d.Generation {
			return nil
		}
		r := s.rev(k, revKey{d.UID, d.Generation})
		if r.rollbackTo != 0 {
			return nil // a duplicate: the first one counts
		}
		r.rollbackTo = d.RollbackTo
		if d.Released == nil {
			r.rolledBackAll = true
			return s.recompute(k)
		}
		r.rolledBack = map[string]bool{}
		for _, dev := range d.Released {
			r.rolledBack[dev] = true
		}
		s.touch(k, d.Released...)
		return s.recomputeDevices(k, d.Released)
	case events.TypeRolloutBatchStarted:
		d, err := p.RolloutTransition()
		if err != nil || d.Batch < 1 {
			return nil
		}
		r := s.rev(k, revKey{d.UID, d.Generation})
		r.batches = max(r.batches, d.Batch)
		for _, dev := range d.Released {
			r.released[dev] = true
		}
		devs := d.Released
		if d.Released == nil {
			if !r.known {
				r.unlisted = append(r.unlisted, d.Batch)
				return nil
			}
			devs = r.releaseBatch(d.Batch)
		}
		s.touch(k, devs...)
		return s.recomputeDevices(k, devs)
	case events.TypeRolloutCanaryStage, events.TypeRolloutReleased:
		d, err := p.RolloutTransition()
		if err != nil {
			return nil
		}
		r := s.rev(k, revKey{d.UID, d.Generation})
		for _, dev := range d.Released {
			r.released[dev] = true
		}
		if ev.Type == events.TypeRolloutCanaryStage && d.Released == nil {
			// The canaries did not fit in one event: every frozen canary
			// not removed before the stage (ADR 0010, addendum).
			return s.recomputeDevices(k, s.releaseUnlistedCanaries(k, r))
		}
		if ev.Type == events.TypeRolloutReleased {
			r.releasedRest = true
		}
		if ev.Type == events.TypeRolloutReleased && d.Released == nil {
			r.releasedAll = true
			for t := range r.targets {
				s.touch(k, t)
			}
		}
		s.touch(k, d.Released...)
		if r.releasedAll {
			return s.recompute(k)
		}
		// A listed release changes only the listed devices' values.
		return s.recomputeDevices(k, d.Released)
	}
	return nil
}

// recompute rebuilds the entries of every device of one Deployment and
// returns those that changed.
func (s *Intent) recompute(k depKey) []string {
	return s.recomputeSome(k, func(yield func(string) bool) {
		for dev := range s.byDep[k] {
			if !yield(dev) {
				return
			}
		}
	})
}

// recomputeDevices rebuilds the entries of devs for one Deployment (a
// release that names them changes nothing else) and returns those that
// changed.
func (s *Intent) recomputeDevices(k depKey, devs []string) []string {
	return s.recomputeSome(k, slices.Values(devs))
}

// recomputeSome rebuilds the entries of devs (each at most once) for one
// Deployment and returns those that changed, sorted.
func (s *Intent) recomputeSome(k depKey, devs iter.Seq[string]) []string {
	revs := s.liveRevs(k)
	var changed []string
	for dev := range devs {
		var want *IntentEntry
		for _, r := range revs {
			if g := r.handedBack[dev]; g > 0 && r.targets[dev] && !r.left[dev] {
				// Joined after the revision failed: it holds the
				// revision it was handed, if that one is known.
				want = nil
				if old := s.deps[k][revKey{r.entry.UID, g}]; old != nil && old.known {
					want = &old.entry
				}
				break
			}
			if r.handed(dev) {
				want = &r.entry
				if r.rollbackTo > 0 && (r.rolledBackAll || r.rolledBack[dev]) {
					// Rolled back: the device holds the revision handed
					// back, if it was handed that one, else nothing.
					want = nil
					if old := s.deps[k][revKey{r.entry.UID, r.rollbackTo}]; old != nil && old.known && (old.handed(dev) || r.joined[dev]) {
						want = &old.entry
					}
				}
				break
			}
			if !r.targets[dev] || r.left[dev] {
				break // a newer revision no longer targets the device, or it left it
			}
		}
		if s.refetch(k, revs, dev) {
			changed = append(changed, dev)
		}
		cur, has := s.devices[dev][k]
		switch {
		case want == nil && has:
			delete(s.devices[dev], k)
			if len(s.devices[dev]) == 0 {
				delete(s.devices, dev)
			}
			delete(s.holders[k], dev)
			changed = append(changed, dev)
		case want != nil && (!has || cur.UID != want.UID || cur.Generation != want.Generation):
			if s.devices[dev] == nil {
				s.devices[dev] = map[depKey]IntentEntry{}
			}
			s.devices[dev][k] = *want
			if s.holders[k] == nil {
				s.holders[k] = map[string]bool{}
			}
			s.holders[k][dev] = true
			changed = append(changed, dev)
		}
	}
	slices.Sort(changed)
	return slices.Compact(changed)
}

// liveRevs returns the known revisions of k, newest first, but those of a
// UID whose deletion was seen: they never count.
func (s *Intent) liveRevs(k depKey) []*intentRev {
	if revs, ok := s.live[k]; ok {
		return revs
	}
	deletedUID := map[string]bool{}
	for rk, r := range s.deps[k] {
		if r.deleted {
			deletedUID[rk.uid] = true
		}
	}
	revs := []*intentRev{}
	for _, r := range s.deps[k] {
		if r.known && !deletedUID[r.entry.UID] {
			revs = append(revs, r)
		}
	}
	slices.SortFunc(revs, func(a, b *intentRev) int { return b.order - a.order })
	if s.live == nil {
		s.live = map[depKey][]*intentRev{}
	}
	s.live[k] = revs
	return revs
}

// Holds reports whether device's value holds exactly revision (uid,
// generation) of Deployment namespace/name: the device was handed that
// revision and no newer one, and the Deployment was not deleted. The
// rollout runner accepts a device's health report only then.
func (s *Intent) Holds(device, namespace, name, uid string, generation int64) bool {
	e, ok := s.devices[device][depKey{namespace, name}]
	return ok && e.UID == uid && e.Generation == generation
}

// Entry returns device's entry of Deployment namespace/name: the revision
// it holds (false: none).
func (s *Intent) Entry(device, namespace, name string) (IntentEntry, bool) {
	e, ok := s.devices[device][depKey{namespace, name}]
	return e, ok
}

// Devices lists every device with a value, sorted.
func (s *Intent) Devices() []string {
	out := make([]string, 0, len(s.devices)+len(s.deviceTasks))
	for d := range s.devices {
		out = append(out, d)
	}
	for d := range s.deviceTasks {
		if _, dup := s.devices[d]; !dup {
			out = append(out, d)
		}
	}
	for d := range s.fetch {
		_, dup := s.devices[d]
		if _, dupTask := s.deviceTasks[d]; !dup && !dupTask {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

// Value returns the canonical JSON of a device's intent, or false when the
// device has nothing to run (its key must not exist).
func (s *Intent) Value(device string) ([]byte, bool) {
	entries := s.devices[device]
	tasks := s.tasksOf(device)
	fetch := s.fetchOf(device)
	if len(entries) == 0 && len(tasks) == 0 && len(fetch) == 0 {
		return nil, false
	}
	v := DeviceIntent{Device: device, Deployments: make([]IntentEntry, 0, len(entries)), Tasks: tasks, Fetch: fetch}
	for _, e := range entries {
		v.Deployments = append(v.Deployments, e)
	}
	slices.SortFunc(v.Deployments, func(a, b IntentEntry) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false // cannot happen: plain strings and raw JSON from a decoded event
	}
	return b, true
}

// releaseBatch hands the revision to the members of plan batch b that were
// not removed before b started, and returns them.
func (r *intentRev) releaseBatch(b int) []string {
	var out []string
	for dev, in := range r.batchOf {
		if in != b {
			continue
		}
		if n, gone := r.removedAfterN[dev]; gone && n < b {
			continue
		}
		r.released[dev] = true
		out = append(out, dev)
	}
	slices.Sort(out)
	return out
}

// releaseUnlistedCanaries folds a canary stage that lists none: it hands
// the revision to every frozen canary not removed before it and returns
// them, or, while the revision is not known, remembers which targets were
// removed before it (the revision's fold hands it then).
func (s *Intent) releaseUnlistedCanaries(k depKey, r *intentRev) []string {
	if r.canariesAll {
		return nil // a duplicate: the first one counts
	}
	r.canariesAll = true
	if !r.known {
		r.canaryRemoved = make(map[string]bool, len(r.removed))
		for dev := range r.removed {
			r.canaryRemoved[dev] = true
		}
		return nil
	}
	out := r.releaseCanaries(r.removed)
	s.touch(k, out...)
	return out
}

// releaseCanaries hands the revision to every frozen canary kept (a set too
// long to list) but those removed, and returns them.
func (r *intentRev) releaseCanaries(removed map[string]bool) []string {
	out := make([]string, 0, len(r.canaries))
	for _, c := range r.canaries {
		if !removed[c] {
			r.released[c] = true
			out = append(out, c)
		}
	}
	return out
}

// CanariesListed reports whether a canary stage lists its canaries: when
// their ids fit in one event (events.ChunkBytes, as a release lists the
// remaining targets). A longer canary set is handed the revision by a
// rollout.canary-stage without a list: readers hand it to every frozen
// canary not removed before the stage.
func CanariesListed(canaries []string) bool { return idBytes(canaries) <= events.ChunkBytes }

// handed reports whether dev was handed the revision (and is its target).
func (r *intentRev) handed(dev string) bool {
	return (r.released[dev] || r.releasedAll && !r.removed[dev]) && r.targets[dev] && !r.left[dev] && r.handedBack[dev] == 0
}

// Revision returns the entry of revision (uid, generation) of Deployment
// namespace/name, if the fold knows it.
func (s *Intent) Revision(namespace, name, uid string, generation int64) (IntentEntry, bool) {
	r := s.deps[depKey{namespace, name}][revKey{uid, generation}]
	if r == nil || !r.known {
		return IntentEntry{}, false
	}
	return r.entry, true
}
