package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// FieldOwnerRollouts is the server-side-apply field manager of the status
// fields the rollout runner owns: revision, phase, counts, latestFailure and
// the Ready condition.
const FieldOwnerRollouts = "fleet-operator-rollouts"

// Filters the rollout runner reads.
const (
	filterDeploymentIntent = "fleet.intent.deployment.*.*"
	filterRollouts         = "fleet.rollout.deployment.*.*"
	filterWorkload         = "fleet.report.*.workload"
)

// EventReader is what the rollout runner needs to read events.
type EventReader interface {
	Replay(ctx context.Context, filter string, from events.Start) iter.Seq2[events.Record, error]
	Follow(ctx context.Context, filter string, from events.Start) iter.Seq2[events.Record, error]
}

// RolloutRunner folds Deployment intent, rollout transitions and workload
// reports; appends the rollout state machine's decisions (optimistic
// concurrency on each Deployment's rollout subject, so several runners never
// duplicate a transition); writes every device's fleet-intent KV value; and
// patches Deployment status, coalesced per Deployment.
//
// On start it rebuilds its state from the first event (three ordered
// consumers, no server-side state), then follows live.
//
// Device input is data, never control: a record that does not decode (on
// any of the three streams) is skipped, counted on Skips and logged, and
// the runner's position in that stream moves past it, so neither the live
// runner nor a restart from the checkpoint ever stops on it. The device a
// report is about is the one in the subject it was stored on (the reader
// refuses an envelope that names another).
type RolloutRunner struct {
	Store  EventStore
	Reader EventReader
	// KV is the fleet-intent bucket.
	KV jetstream.KeyValue
	// JS, when set, publishes the bucket's puts asynchronously (a window
	// of acknowledgements in flight); nil: the Store's (an *events.Store),
	// else one synchronous put per device.
	JS     jetstream.JetStream
	Client client.Client
	Log    *slog.Logger
	// StatusInterval is the least time between two status patches of one
	// Deployment. Default 2s.
	StatusInterval time.Duration
	// Checkpoints, when set, is where the runner keeps a snapshot of its
	// folds and the stream positions they cover (object CheckpointObject):
	// a restart resumes from it instead of folding every event again. Nil:
	// rebuild from zero on every start.
	Checkpoints jetstream.ObjectStore
	// CheckpointInterval is how often a changed state is written. Default
	// 30s; the state is also written when the runner stops.
	CheckpointInterval time.Duration
	// Skips counts the records the runner skips because they do not decode
	// (a device's garbage on its report subject, a JetStream answer aimed
	// at a stream). Nil: they are only logged.
	Skips *events.SkipCounter
}

// CheckpointObject is the name of the runner's snapshot in Checkpoints.
const CheckpointObject = "rollout-runner"

// checkpoint is the snapshot the runner writes: its folds and the last
// sequence it folded of each stream it reads.
type checkpoint struct {
	Version    int                            `json:"version"`
	Seqs       [3]uint64                      `json:"seqs"`
	Rollouts   map[string]projections.Rollout `json:"rollouts"`
	Intent     *projections.Intent            `json:"intent"`
	RolloutSeq map[string]uint64              `json:"rolloutSeq"`
}

type depKey struct{ ns, name string }

type sourced struct {
	rec    events.Record
	source int
	caught bool // a marker: source has caught up with its history
	// skip, when set, is a record of source that does not decode: the
	// runner counts it and moves past it.
	skip *events.RecordError
	err  error
}

// runnerState is owned by the Run goroutine.
type runnerState struct {
	// seqs is the last folded sequence of each source stream.
	seqs       [3]uint64
	changed    bool // since the last checkpoint
	rollouts   map[depKey]projections.Rollout
	intent     *projections.Intent
	rolloutSeq map[depKey]uint64
	dirtyKV    map[string]bool
	dirtyStat  map[depKey]bool
	written    map[string]string // device → value last put ("" = none)
	// live is set once every source caught up with its history.
	live bool
	// revisionless counts the rollouts that have reports or transitions but
	// no revision yet. While catching up that is normal (the three streams
	// are read side by side, so a Deployment's reports may come before its
	// revision); once live only a runner that lags another, or a device
	// naming Deployments that do not exist, makes one, and maxRevisionless
	// bounds them.
	revisionless int
	// dropped counts the reports dropped once live because a bound was
	// reached (maxRevisionless, maxEarlyRevisions); the first of a run is
	// logged.
	dropped int
}

// Bounds on what device reports can add to the runner's state once it is
// live (see runnerState.revisionless). Past them a report costs a decode and
// nothing else: it is dropped. A device that fills them with made-up
// Deployments or revisions can only delay a runner that lags another (its
// own revision's reports and the leading runner's transitions still come).
const (
	// maxRevisionless is how many Deployments without a known revision
	// the runner keeps reports for.
	maxRevisionless = 1024
	// maxEarlyRevisions is how many revisions of one Deployment the runner
	// keeps reports for ahead of the revision it is at.
	maxEarlyRevisions = 8
)

// Run runs until ctx ends.
func (r *RolloutRunner) Run(ctx context.Context) error {
	if r.StatusInterval == 0 {
		r.StatusInterval = 2 * time.Second
	}
	if r.CheckpointInterval == 0 {
		r.CheckpointInterval = 30 * time.Second
	}
	if js, ok := r.Store.(interface{ JetStream() jetstream.JetStream }); ok && r.JS == nil {
		r.JS = js.JetStream()
	}
	s := &runnerState{rollouts: map[depKey]projections.Rollout{}, intent: projections.NewIntent(),
		rolloutSeq: map[depKey]uint64{}, dirtyKV: map[string]bool{}, dirtyStat: map[depKey]bool{}, written: map[string]string{}}
	r.restore(ctx, s)
	defer r.saveCheckpoint(s)

	ctx, cancel := context.WithCancel(ctx)
	in := make(chan sourced, 1024)
	var wg sync.WaitGroup
	defer func() {
		cancel() // readers stop on it; then wait for them
		wg.Wait()
	}()
	for i, filter := range []string{filterDeploymentIntent, filterRollouts, filterWorkload} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.read(ctx, i, filter, s.seqs[i], in)
		}()
	}
	ckpt := time.NewTicker(r.CheckpointInterval)
	defer ckpt.Stop()
	caught := 0
	live := false
	tick := time.NewTicker(r.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if live {
				r.flushStatus(ctx, s)
			}
		case <-ckpt.C:
			if live && s.changed {
				r.saveCheckpoint(s)
			}
		case m := <-in:
			switch {
			case m.err != nil:
				return fmt.Errorf("rollout runner: %w", m.err)
			case m.skip != nil:
				if k, ok := r.skipped(ctx, s, m); ok && live {
					r.decide(ctx, s, k)
				}
			case m.caught:
				if caught++; caught == 3 {
					live = true
					s.live = true
					if err := r.syncKV(ctx, s); err != nil {
						if ctx.Err() != nil {
							return nil // stopped while catching up
						}
						return err
					}
					keys := make([]depKey, 0, len(s.rollouts))
					for k := range s.rollouts {
						keys = append(keys, k)
					}
					slices.SortFunc(keys, func(a, b depKey) int { return cmpKey(a, b) })
					for _, k := range keys {
						r.decide(ctx, s, k)
					}
					r.flushStatus(ctx, s)
					r.Log.InfoContext(ctx, "rollout runner caught up", "deployments", len(s.rollouts))
				}
			default:
				k, ok := r.fold(s, m)
				if ok && live {
					r.decide(ctx, s, k)
				}
				if live {
					r.flushKV(ctx, s)
				}
			}
		}
	}
}

func cmpKey(a, b depKey) int {
	if a.ns != b.ns {
		if a.ns < b.ns {
			return -1
		}
		return 1
	}
	switch {
	case a.name < b.name:
		return -1
	case a.name > b.name:
		return 1
	}
	return 0
}

// read replays one filter from after sequence after to its end, marks the
// catch-up, then follows.
func (r *RolloutRunner) read(ctx context.Context, source int, filter string, after uint64, out chan<- sourced) {
	send := func(m sourced) bool {
		select {
		case out <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	last := after
	for rec, err := range r.Reader.Replay(ctx, filter, events.FromSequence(after+1)) {
		m, ok := r.sourced(ctx, source, rec, err)
		if !ok {
			if m.err != nil {
				send(m)
			}
			return
		}
		last = m.seq()
		if !send(m) {
			return
		}
	}
	if !send(sourced{source: source, caught: true}) {
		return
	}
	for rec, err := range r.Reader.Follow(ctx, filter, events.FromSequence(last+1)) {
		m, ok := r.sourced(ctx, source, rec, err)
		if !ok {
			if m.err != nil {
				send(m)
			}
			return
		}
		if m.seq() <= last {
			continue
		}
		if !send(m) {
			return
		}
	}
}

// sourced turns what a read yielded into the runner's message. A record
// that does not decode becomes a skip and the read goes on; any other error
// ends the read (ok false; m.err is set unless ctx ended).
func (r *RolloutRunner) sourced(ctx context.Context, source int, rec events.Record, err error) (m sourced, ok bool) {
	if err == nil {
		return sourced{rec: rec, source: source}, true
	}
	if re, isRec := events.AsRecordError(err); isRec {
		return sourced{rec: rec, source: source, skip: re}, true
	}
	if ctx.Err() != nil {
		return sourced{}, false
	}
	return sourced{err: err}, false
}

// seq is the stream sequence of the record or skip m carries.
func (m sourced) seq() uint64 {
	if m.skip != nil {
		return m.skip.Sequence
	}
	return m.rec.Sequence
}

// skipped moves the runner's position in a stream past a record that does
// not decode, counts and logs it. A record on a Deployment's rollout subject
// still moves that subject's last sequence, which the runner's next append
// expects: it returns that Deployment, to decide again (an append that
// conflicted with the record waits for it).
func (r *RolloutRunner) skipped(ctx context.Context, s *runnerState, m sourced) (depKey, bool) {
	seq := m.skip.Sequence
	if seq <= s.seqs[m.source] {
		return depKey{}, false // already passed (covered by the checkpoint)
	}
	s.seqs[m.source] = seq
	s.changed = true
	r.Skips.Skip(ctx, r.Log, m.skip)
	if m.source != 1 {
		return depKey{}, false
	}
	ref, err := events.ParseSubject(m.skip.Subject)
	if err != nil || ref.Family != events.FamilyDeploymentRollout {
		return depKey{}, false
	}
	k := depKey{ref.Keys.Namespace, ref.Keys.Name}
	if seq > s.rolloutSeq[k] {
		s.rolloutSeq[k] = seq
	}
	return k, true
}

// fold applies one record and returns the Deployment it concerns.
func (r *RolloutRunner) fold(s *runnerState, m sourced) (depKey, bool) {
	ev := m.rec.Event
	if m.rec.Sequence <= s.seqs[m.source] {
		return depKey{}, false // already folded (covered by the checkpoint)
	}
	s.seqs[m.source] = m.rec.Sequence
	s.changed = true
	var k depKey
	var wd events.WorkloadStatus // source 2
	switch m.source {
	case 0, 1:
		k = depKey{ev.Keys.Namespace, ev.Keys.Name}
		if m.source == 1 && m.rec.Sequence > s.rolloutSeq[k] {
			s.rolloutSeq[k] = m.rec.Sequence
		}
		for _, d := range s.intent.Apply(ev) {
			s.dirtyKV[d] = true
		}
	case 2:
		var err error
		wd, err = events.Decode[events.WorkloadStatus](ev)
		if err != nil {
			// A valid envelope whose data does not decode: skipped like
			// any undecodable record (the position already moved past it).
			r.Skips.Skip(context.Background(), r.Log, events.InvalidData(m.rec, err))
			return depKey{}, false
		}
		k = depKey{wd.Namespace, wd.Deployment}
	}
	ro, known := s.rollouts[k]
	if m.source == 2 && s.live {
		var bound string
		switch {
		case !known && s.revisionless >= maxRevisionless:
			bound = "Deployments without a known revision"
		case known && !ro.IsCurrent(wd.UID, wd.Generation) && !ro.HasEarly(wd.UID, wd.Generation) && ro.EarlyRevisions() >= maxEarlyRevisions:
			bound = "revisions ahead of the one the runner is at"
		}
		if bound != "" {
			if s.dropped == 0 {
				r.Log.Warn("a report dropped: the runner keeps reports for a bounded number of "+bound+" (a lagging runner, or a device naming Deployments or revisions that do not exist); later drops are counted, not logged",
					"stream", m.rec.Stream, "subject", m.rec.Subject, "seq", m.rec.Sequence)
			}
			s.dropped++
			return depKey{}, false
		}
	}
	wasRevisionless := ro.UID == ""
	ro.Fold(ev) // the runner's own state: in place, O(1) per report
	s.rollouts[k] = ro
	switch {
	case !known && ro.UID == "":
		s.revisionless++
	case known && wasRevisionless && ro.UID != "":
		s.revisionless--
	}
	s.dirtyStat[k] = true
	return k, true
}

// decide appends the state machine's next transitions for one Deployment.
func (r *RolloutRunner) decide(ctx context.Context, s *runnerState, k depKey) {
	ro := s.rollouts[k]
	for _, tr := range ro.Next() {
		ev, err := events.New(events.Keys{Namespace: k.ns, Name: k.name}, tr, events.WithCorrelation(ro.UID, ro.Generation))
		if err != nil {
			r.Log.Error("build rollout transition", "deployment", k.ns+"/"+k.name, "error", err)
			return
		}
		pos, err := r.Store.Append(ctx, ev, events.ExpectLastSubjectSequence(s.rolloutSeq[k]))
		if errors.Is(err, events.ErrConflict) {
			// Another runner decided first; its events are on their way
			// and the decision is re-taken when they are folded.
			r.Log.DebugContext(ctx, "rollout transition conflict", "deployment", k.ns+"/"+k.name, "type", tr.EventType())
			return
		}
		if err != nil {
			r.Log.ErrorContext(ctx, "append rollout transition", "deployment", k.ns+"/"+k.name, "type", tr.EventType(), "error", err)
			return
		}
		s.rolloutSeq[k] = pos.Sequence
		folded := s.rollouts[k]
		folded.Fold(ev)
		s.rollouts[k] = folded
		for _, d := range s.intent.Apply(ev) {
			s.dirtyKV[d] = true
		}
		s.dirtyStat[k] = true
		r.Log.InfoContext(ctx, "rollout transition", "deployment", k.ns+"/"+k.name, "type", tr.EventType(),
			"revision", ro.RevisionID, "succeeded", tr.Counts.Succeeded, "failed", tr.Counts.Failed, "total", tr.Counts.Total)
	}
}

// syncKV makes the bucket equal to the folded state once caught up: puts
// values that differ and deletes keys of devices with nothing to run.
func (r *RolloutRunner) syncKV(ctx context.Context, s *runnerState) error {
	keys, err := r.KV.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("rollout runner: list fleet-intent keys: %w", err)
	}
	for k := range keys.Keys() {
		e, err := r.KV.Get(ctx, k)
		if err == nil {
			s.written[k] = string(e.Value())
		}
		s.dirtyKV[k] = true
	}
	for _, d := range s.intent.Devices() {
		s.dirtyKV[d] = true
	}
	r.flushKV(ctx, s)
	return nil
}

// flushKV writes the changed devices' values.
func (r *RolloutRunner) flushKV(ctx context.Context, s *runnerState) {
	// With JS the puts are asynchronous, at most kvWindow in flight: a
	// release to N devices costs about one round trip per window instead of
	// one per device. A put that fails stays dirty for the next flush.
	type put struct {
		dev, val string
		fut      jetstream.PubAckFuture
	}
	var inflight []put
	settle := func(p put) {
		select {
		case <-p.fut.Ok():
			s.written[p.dev] = p.val
			delete(s.dirtyKV, p.dev)
		case err := <-p.fut.Err():
			r.Log.ErrorContext(ctx, "put fleet-intent", "device", p.dev, "error", err)
		case <-time.After(kvAckTimeout):
			r.Log.ErrorContext(ctx, "put fleet-intent: no acknowledgement", "device", p.dev, "timeout", kvAckTimeout)
		case <-ctx.Done():
		}
	}
	for dev := range s.dirtyKV {
		val, ok := s.intent.Value(dev)
		prev, had := s.written[dev]
		switch {
		case ok && (!had || prev != string(val)):
			if r.JS != nil {
				fut, err := r.JS.PublishAsync("$KV."+r.KV.Bucket()+"."+dev, val)
				if err != nil {
					r.Log.ErrorContext(ctx, "put fleet-intent", "device", dev, "error", err)
					continue
				}
				inflight = append(inflight, put{dev: dev, val: string(val), fut: fut})
				if len(inflight) >= kvWindow {
					settle(inflight[0])
					inflight = inflight[1:]
				}
				continue
			}
			if _, err := r.KV.Put(ctx, dev, val); err != nil {
				r.Log.ErrorContext(ctx, "put fleet-intent", "device", dev, "error", err)
				continue
			}
			s.written[dev] = string(val)
		case !ok && had:
			if err := r.KV.Delete(ctx, dev); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
				r.Log.ErrorContext(ctx, "delete fleet-intent", "device", dev, "error", err)
				continue
			}
			delete(s.written, dev)
		}
		delete(s.dirtyKV, dev)
	}
	for _, p := range inflight {
		settle(p)
	}
}

// kvWindow is how many fleet-intent puts flushKV keeps in flight;
// kvAckTimeout how long it waits for one acknowledgement.
const (
	kvWindow     = 256
	kvAckTimeout = 30 * time.Second
)

// flushStatus patches the status of every Deployment that changed.
func (r *RolloutRunner) flushStatus(ctx context.Context, s *runnerState) {
	for k := range s.dirtyStat {
		ro := s.rollouts[k]
		st, ok := ro.Status()
		if !ok || ro.Deleted {
			delete(s.dirtyStat, k)
			continue
		}
		err := applyStatus(ctx, r.Client, "Deployment", k.ns, k.name, &st, FieldOwnerRollouts)
		if err != nil && !apierrors.IsNotFound(err) {
			r.Log.ErrorContext(ctx, "patch deployment status", "deployment", k.ns+"/"+k.name, "error", err)
			continue // retried on the next tick
		}
		delete(s.dirtyStat, k)
	}
}

// restore loads the checkpoint, if any, into s. A checkpoint that cannot be
// read is ignored: the runner then rebuilds from zero, which is always
// correct, only slower.
func (r *RolloutRunner) restore(ctx context.Context, s *runnerState) {
	if r.Checkpoints == nil {
		return
	}
	b, err := r.Checkpoints.GetBytes(ctx, CheckpointObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return
	}
	var c checkpoint
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil || c.Version != 1 || c.Intent == nil {
		r.Log.WarnContext(ctx, "checkpoint unusable, rebuilding from the first event", "error", err)
		return
	}
	for k, ro := range c.Rollouts {
		ns, name, _ := strings.Cut(k, "/")
		s.rollouts[depKey{ns, name}] = ro
		if ro.UID == "" {
			s.revisionless++
		}
	}
	for k, seq := range c.RolloutSeq {
		ns, name, _ := strings.Cut(k, "/")
		s.rolloutSeq[depKey{ns, name}] = seq
	}
	s.intent = c.Intent
	s.seqs = c.Seqs
	for k := range s.rollouts {
		s.dirtyStat[k] = true
	}
	r.Log.InfoContext(ctx, "resuming from checkpoint", "deployments", len(s.rollouts),
		"intentSeq", c.Seqs[0], "rolloutSeq", c.Seqs[1], "reportSeq", c.Seqs[2])
}

// saveCheckpoint writes the state. It runs on the Run goroutine (also when
// it returns), so the state is consistent with the sequences.
func (r *RolloutRunner) saveCheckpoint(s *runnerState) {
	if r.Checkpoints == nil || !s.changed {
		return
	}
	c := checkpoint{Version: 1, Seqs: s.seqs, Rollouts: map[string]projections.Rollout{}, Intent: s.intent, RolloutSeq: map[string]uint64{}}
	for k, ro := range s.rollouts {
		c.Rollouts[k.ns+"/"+k.name] = ro
	}
	for k, seq := range s.rolloutSeq {
		c.RolloutSeq[k.ns+"/"+k.name] = seq
	}
	b, err := json.Marshal(c)
	if err != nil {
		r.Log.Error("encode checkpoint", "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := r.Checkpoints.PutBytes(ctx, CheckpointObject, b); err != nil {
		r.Log.Error("write checkpoint", "error", err)
		return
	}
	s.changed = false
}
