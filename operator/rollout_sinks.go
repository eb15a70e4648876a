package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// The rollout runner's sinks: where what it folded goes. The transition
// appender is its EventStore; the status writer, the fleet-intent writer
// and the checkpoints are here.

// DeploymentStatusWriter receives the status the rollout runner folded for
// one Deployment: revision, phase, counts, latestFailure and the Ready
// condition. A Deployment that no longer exists is not an error.
type DeploymentStatusWriter interface {
	WriteDeploymentStatus(ctx context.Context, namespace, name string, st fleetv1.DeploymentStatus) error
}

// KubeStatus writes the rollout runner's Deployment status to the
// Kubernetes API: a server-side apply of the fields it owns (field manager
// FieldOwnerRollouts), forcing ownership. A Deployment that is gone is
// skipped.
type KubeStatus struct {
	Client client.Client
}

// WriteDeploymentStatus applies st to Deployment namespace/name.
func (k KubeStatus) WriteDeploymentStatus(ctx context.Context, namespace, name string, st fleetv1.DeploymentStatus) error {
	err := applyStatus(ctx, k.Client, "Deployment", namespace, name, &st, FieldOwnerRollouts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// writeStatus hands the status of every Deployment that changed to w; one
// that fails stays dirty for the next tick.
func writeStatus(ctx context.Context, w DeploymentStatusWriter, log *slog.Logger, m *Metrics, s *runnerState) {
	defer m.rolloutGauges(s)
	for k := range s.dirtyStat {
		ro := s.rollouts[k]
		st, ok := ro.Status()
		if !ok || ro.Deleted {
			delete(s.dirtyStat, k)
			continue
		}
		err := w.WriteDeploymentStatus(ctx, k.ns, k.name, st)
		m.statusWrite(err)
		if err != nil {
			log.ErrorContext(ctx, "write deployment status", "deployment", k.ns+"/"+k.name, "error", err)
			continue // retried on the next tick
		}
		delete(s.dirtyStat, k)
	}
}

// intentWriter keeps the fleet-intent bucket equal to the fold: one value
// per device with something to run, no key for a device without.
//
// Every write is conditional on the revision the writer last saw for the
// key (the stream's expected last subject sequence), so a writer never
// overwrites a value it has not seen: a deposed leader that has not yet
// exited loses against the new leader instead of replacing a newer value
// with an older fold. A conflict re-reads the key and leaves the device
// dirty; the next flush (the next record or tick) compares again.
type intentWriter struct {
	kv jetstream.KeyValue
	// js, when set, publishes the puts asynchronously (a window of
	// acknowledgements in flight); nil: one synchronous put per device.
	js      jetstream.JetStream
	log     *slog.Logger
	metrics *Metrics
	// written is what the bucket holds per device, as this writer last
	// wrote or read it. A device missing from it is taken to have never had
	// a key (revision 0); a wrong guess is a conflict that re-reads.
	written map[string]kvSlot
}

// intentValues is what the intent writer reads of the fold
// (*projections.Intent): every device with a value, and one device's value.
type intentValues interface {
	Devices() []string
	Value(device string) ([]byte, bool)
}

// kvSlot is one fleet-intent key as the writer knows it.
type kvSlot struct {
	// val is the value the key holds; "" when it holds none (never
	// written, deleted or purged).
	val string
	// rev is the key's revision (the stream sequence of its last
	// message); 0 when the key never had one.
	rev uint64
	// markerUnknown: the key holds a delete or purge marker whose revision
	// the writer does not know (a delete does not return it); the next
	// put creates the key (kv.Create finds the marker's revision itself).
	markerUnknown bool
}

// errNoAck is a put whose acknowledgement did not come in kvAckTimeout.
var errNoAck = errors.New("no acknowledgement")

// kvWindow is how many fleet-intent puts flush keeps in flight;
// kvAckTimeout how long it waits for one acknowledgement.
const (
	kvWindow     = 256
	kvAckTimeout = 30 * time.Second
)

// kvConflict reports whether a conditional write lost against another
// writer: the key's revision was not the one expected. A single-replica
// stream answers with code 10071, a replicated one with 10164.
func kvConflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}

// sync makes the bucket equal to the fold once caught up: it reads what
// the bucket holds, then puts values that differ and deletes keys of
// devices with nothing to run.
func (w *intentWriter) sync(ctx context.Context, intent intentValues, dirty map[string]bool) error {
	keys, err := w.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("rollout runner: list fleet-intent keys: %w", err)
	}
	for k := range keys.Keys() {
		e, err := w.kv.Get(ctx, k)
		if err == nil {
			w.written[k] = kvSlot{val: string(e.Value()), rev: e.Revision()}
		}
		dirty[k] = true
	}
	for _, d := range intent.Devices() {
		dirty[d] = true
	}
	w.flush(ctx, intent, dirty)
	return nil
}

// reread learns what the bucket holds for dev after a conflict: the
// key's last message, a value or a delete/purge marker, with its revision.
func (w *intentWriter) reread(ctx context.Context, dev string) {
	if w.js != nil {
		st, err := w.js.Stream(ctx, "KV_"+w.kv.Bucket())
		if err == nil {
			var m *jetstream.RawStreamMsg
			m, err = st.GetLastMsgForSubject(ctx, "$KV."+w.kv.Bucket()+"."+dev)
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				w.written[dev] = kvSlot{}
				return
			case err == nil:
				slot := kvSlot{rev: m.Sequence}
				if op := m.Header.Get(kvOperationHeader); op != "DEL" && op != "PURGE" {
					slot.val = string(m.Data)
				}
				w.written[dev] = slot
				return
			}
		}
		w.log.ErrorContext(ctx, "read fleet-intent after a conflicting write", "device", dev, "error", err)
		delete(w.written, dev)
		return
	}
	e, err := w.kv.Get(ctx, dev)
	switch {
	case err == nil:
		w.written[dev] = kvSlot{val: string(e.Value()), rev: e.Revision()}
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Deleted or purged (or never written, in which case a create
		// works as well).
		w.written[dev] = kvSlot{markerUnknown: true}
	default:
		w.log.ErrorContext(ctx, "read fleet-intent after a conflicting write", "device", dev, "error", err)
		delete(w.written, dev)
	}
}

// kvOperationHeader is the header a KV delete or purge marker carries.
const kvOperationHeader = "KV-Operation"

// settled records the outcome of one write of dev: on success the slot it
// left, on a conflict what the bucket holds now (conflict is then true).
// It reports whether dev is done (no longer dirty).
func (w *intentWriter) settled(ctx context.Context, op, dev string, slot kvSlot, err error) (done, conflict bool) {
	w.metrics.intentWrite(op, err)
	switch {
	case err == nil:
		w.written[dev] = slot
		return true, false
	case kvConflict(err):
		w.log.WarnContext(ctx, op+" fleet-intent: the key changed since this writer last saw it (another writer, or a key deleted before this writer started); reading it again",
			"device", dev)
		w.reread(ctx, dev)
		return false, true
	default:
		w.log.ErrorContext(ctx, op+" fleet-intent", "device", dev, "error", err)
		return false, false
	}
}

// flush writes the values of the dirty devices that changed and forgets
// each device it wrote. A device whose write conflicted is read again and
// written once more in the same flush; a write that fails, or conflicts
// twice, stays dirty for the next flush (the next record or tick).
func (w *intentWriter) flush(ctx context.Context, intent intentValues, dirty map[string]bool) {
	again := w.write(ctx, intent, dirty, dirty)
	// Only a key that holds no value is written again at once: a conflict
	// over a delete marker is this writer not knowing the marker's
	// revision (a key deleted before it started). A value another writer
	// put waits for the next flush, so two replicas that disagree (a
	// deposed leader that has not exited yet) do not trade writes at full
	// speed; the leader's watch (foreign) repairs what the other wrote.
	for dev := range again {
		if w.written[dev].val != "" {
			delete(again, dev)
		}
	}
	if len(again) > 0 {
		w.write(ctx, intent, again, dirty)
	}
}

// kvUpdate is one write to the fleet-intent bucket seen by the writer's
// watch: the key and its new revision.
type kvUpdate struct {
	key string
	rev uint64
}

// watch follows every later write to the bucket (headers only) and sends
// each to out until ctx ends. The runner hands them to foreign.
func (w *intentWriter) watch(ctx context.Context, out chan<- kvUpdate) error {
	wa, err := w.kv.WatchAll(ctx, jetstream.MetaOnly(), jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("rollout runner: watch fleet-intent: %w", err)
	}
	go func() {
		defer func() { _ = wa.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-wa.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				select {
				case out <- kvUpdate{key: e.Key(), rev: e.Revision()}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return nil
}

// foreign looks at one write the watch saw, after every write of this
// writer up to then has settled (flush returns only then): a revision
// newer than the one this writer knows for the key is another writer's
// (a deposed leader that has not exited yet, a person with the nats CLI).
// The key is read again and made dirty, so the next flush puts the fold's
// value back. It reports whether the write was foreign.
func (w *intentWriter) foreign(ctx context.Context, u kvUpdate, dirty map[string]bool) bool {
	cur, ok := w.written[u.key]
	if ok && cur.rev >= u.rev {
		return false // this writer's own, or older than what it knows
	}
	w.reread(ctx, u.key)
	dirty[u.key] = true
	return true
}

// write writes the devices of round, deleting from dirty each one done,
// and returns those whose write conflicted.
func (w *intentWriter) write(ctx context.Context, intent intentValues, round, dirty map[string]bool) map[string]bool {
	// With js the writes are asynchronous, at most kvWindow in flight: a
	// release to N devices costs about one round trip per window instead of
	// one per device.
	type pending struct {
		op, dev, val string
		fut          jetstream.PubAckFuture
	}
	var inflight []pending
	conflicted := map[string]bool{}
	done := func(op, dev string, slot kvSlot, err error) {
		ok, conflict := w.settled(ctx, op, dev, slot, err)
		if ok {
			delete(dirty, dev)
		}
		if conflict {
			conflicted[dev] = true
		}
	}
	settle := func(p pending) {
		select {
		case ack := <-p.fut.Ok():
			done(p.op, p.dev, kvSlot{val: p.val, rev: ack.Sequence}, nil)
		case err := <-p.fut.Err():
			done(p.op, p.dev, kvSlot{}, err)
		case <-time.After(kvAckTimeout):
			w.log.ErrorContext(ctx, p.op+" fleet-intent: no acknowledgement", "device", p.dev, "timeout", kvAckTimeout)
			w.metrics.intentWrite(p.op, errNoAck)
			delete(w.written, p.dev) // the write may have landed: the next one conflicts and re-reads
		case <-ctx.Done():
		}
	}
	async := func(op, dev, val string, m *nats.Msg, rev uint64) {
		fut, err := w.js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(rev))
		if err != nil {
			done(op, dev, kvSlot{}, err)
			return
		}
		inflight = append(inflight, pending{op: op, dev: dev, val: val, fut: fut})
		if len(inflight) >= kvWindow {
			settle(inflight[0])
			inflight = inflight[1:]
		}
	}
	subject := func(dev string) string { return "$KV." + w.kv.Bucket() + "." + dev }
	for dev := range round {
		val, ok := intent.Value(dev)
		cur := w.written[dev]
		switch {
		case ok && cur.val != string(val):
			switch {
			case cur.markerUnknown:
				rev, err := w.kv.Create(ctx, dev, val)
				done("put", dev, kvSlot{val: string(val), rev: rev}, err)
			case w.js != nil:
				async("put", dev, string(val), &nats.Msg{Subject: subject(dev), Data: val}, cur.rev)
			default:
				rev, err := w.kv.Update(ctx, dev, val, cur.rev)
				done("put", dev, kvSlot{val: string(val), rev: rev}, err)
			}
		case !ok && cur.val != "":
			if w.js != nil {
				m := &nats.Msg{Subject: subject(dev), Header: nats.Header{kvOperationHeader: []string{"DEL"}}}
				async("delete", dev, "", m, cur.rev)
				continue
			}
			err := w.kv.Delete(ctx, dev, jetstream.LastRevision(cur.rev))
			done("delete", dev, kvSlot{markerUnknown: true}, err)
		default:
			delete(dirty, dev)
		}
	}
	for _, p := range inflight {
		settle(p)
	}
	return conflicted
}

// CheckpointObject is the name of the runner's snapshot in its Checkpoints
// object store.
const CheckpointObject = "rollout-runner"

// checkpointVersion is the version of the checkpoints this build writes and
// restores. 2: the intent source includes TaskRun intent (a version 1
// checkpoint's position passed TaskRun events it never folded, so it is
// rebuilt from the first event).
const checkpointVersion = 2

// checkpoint is the snapshot the runner writes: its folds and the last
// sequence it folded of each stream it reads.
type checkpoint struct {
	Version    int                            `json:"version"`
	Seqs       [3]uint64                      `json:"seqs"`
	Rollouts   map[string]projections.Rollout `json:"rollouts"`
	Intent     *projections.Intent            `json:"intent"`
	RolloutSeq map[string]uint64              `json:"rolloutSeq"`
	// RevisedAt is when each Deployment's current revision was stored
	// (absent from checkpoints of earlier builds: then unknown).
	RevisedAt map[string]time.Time `json:"revisedAt,omitempty"`
}

// checkpoints keeps the fold in an object store (object CheckpointObject).
// A nil store keeps nothing: every start rebuilds from the first event.
type checkpoints struct {
	store   jetstream.ObjectStore
	log     *slog.Logger
	metrics *Metrics
}

// restore loads the checkpoint, if any, into s. A checkpoint that cannot be
// read is ignored: the runner then rebuilds from zero, which is always
// correct, only slower.
func (c checkpoints) restore(ctx context.Context, s *runnerState) {
	if c.store == nil {
		return
	}
	b, err := c.store.GetBytes(ctx, CheckpointObject)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return
	}
	var cp checkpoint
	if err == nil {
		err = json.Unmarshal(b, &cp)
	}
	if err != nil || cp.Version != checkpointVersion || cp.Intent == nil {
		c.log.WarnContext(ctx, "checkpoint unusable, rebuilding from the first event", "error", err)
		return
	}
	for k, ro := range cp.Rollouts {
		ns, name, _ := strings.Cut(k, "/")
		s.rollouts[depKey{ns, name}] = ro
		if ro.UID == "" {
			s.revisionless++
		}
	}
	for k, seq := range cp.RolloutSeq {
		ns, name, _ := strings.Cut(k, "/")
		s.rolloutSeq[depKey{ns, name}] = seq
	}
	for k, at := range cp.RevisedAt {
		ns, name, _ := strings.Cut(k, "/")
		s.revisedAt[depKey{ns, name}] = at
	}
	s.intent = cp.Intent
	s.seqs = cp.Seqs
	for k := range s.rollouts {
		s.dirtyStat[k] = true
	}
	c.log.InfoContext(ctx, "resuming from checkpoint", "deployments", len(s.rollouts),
		"intentSeq", cp.Seqs[sourceIntent], "rolloutSeq", cp.Seqs[sourceRollouts], "reportSeq", cp.Seqs[sourceReports])
}

// save writes the state when it changed since the last save. It runs on the
// Run goroutine (also when it returns), so the state is consistent with the
// sequences.
func (c checkpoints) save(s *runnerState) {
	if c.store == nil || !s.changed {
		return
	}
	cp := checkpoint{Version: checkpointVersion, Seqs: s.seqs, Rollouts: map[string]projections.Rollout{}, Intent: s.intent, RolloutSeq: map[string]uint64{},
		RevisedAt: map[string]time.Time{}}
	for k, ro := range s.rollouts {
		cp.Rollouts[k.ns+"/"+k.name] = ro
	}
	for k, seq := range s.rolloutSeq {
		cp.RolloutSeq[k.ns+"/"+k.name] = seq
	}
	for k, at := range s.revisedAt {
		cp.RevisedAt[k.ns+"/"+k.name] = at
	}
	b, err := json.Marshal(cp)
	if err != nil {
		c.log.Error("encode checkpoint", "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.store.PutBytes(ctx, CheckpointObject, b); err != nil {
		c.log.Error("write checkpoint", "error", err)
		return
	}
	s.changed = false
	c.metrics.checkpointed(time.Now())
}
