package rollouts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/kstatus"
	"github.com/nationtech/harmony-fleet/operator/internal/kvstore"
	"github.com/nationtech/harmony-fleet/projections"
)

// The rollout runner's sinks: where what it folded goes. The transition
// appender is its intent.Store; the status writer, the fleet-intent writer
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
	err := kstatus.Apply(ctx, k.Client, "Deployment", namespace, name, &st, FieldOwnerRollouts)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// writeStatus hands the status of every Deployment that changed to w, as
// at now with def the operator's progress deadline; one that fails stays
// dirty for the next tick.
func writeStatus(ctx context.Context, w DeploymentStatusWriter, log *slog.Logger, m *Metrics, s *runnerState, now time.Time, def time.Duration) {
	defer m.rolloutGauges(s)
	for k := range s.dirtyStat {
		ro := s.rollouts[k]
		st, ok := projections.DeploymentStatusAt(ro, s.health[k], now, def)
		if !ok || ro.Deleted {
			m.degradedDevices(k, -1)
			delete(s.dirtyStat, k)
			continue
		}
		m.degradedDevices(k, int(st.Counts.Degraded))
		st.Prefetched = s.prefetched(k)
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
//
// With a JetStream context the writes of one flush go in atomic batches of
// at most kvBatch (ADR 0011, "Addendum: batched intent writes"): the bucket's
// stream stores a batch whole or not at all, each write of it still
// conditional on its key's revision, and a server that syncs every write
// syncs once per batch instead of once per device. A batch refused as a
// whole (a conflict on one of its keys, a bucket provisioned without atomic
// publish) is written again one write at a time, each conditional as
// before, so the conflicting keys are found and re-read.
type intentWriter struct {
	kv jetstream.KeyValue
	// js, when set, publishes the puts asynchronously (atomic batches, a
	// window of writes in flight); nil: one synchronous put per device.
	js jetstream.JetStream
	// noBatch: the bucket refused an atomic batch because its stream does
	// not allow them (provisioned by an earlier build): this writer writes
	// one value at a time from then on.
	noBatch bool
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
// kvAckTimeout how long it waits for the next acknowledgement before it
// stops waiting for the puts in flight (retried on the runner's next tick).
const (
	kvWindow     = 256
	kvAckTimeout = 10 * time.Second
)

// kvBatch is the most writes one atomic batch carries (the server's limit
// is 1,000 by default), kvBatches how many batches are in flight at once.
// A batch costs the server a staging store of its own and two syncs
// whatever its size (about 20 ms on the benchmark's disk), so batches are
// large; two in flight let the server stage one while it commits the other.
const (
	kvBatch   = 256
	kvBatches = 2
)

// Headers of a JetStream atomic batch publish (ADR-50 of nats-architecture-
// and-design) and the error code of a stream that does not allow it.
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"

	errCodeAtomicPublishDisabled jetstream.ErrorCode = 10174
)

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
	case kvstore.Conflict(err):
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
	// A write published while the bucket's stream has no leader (a cluster
	// electing one) is never answered: once no acknowledgement came for
	// kvAckTimeout, the flush stops waiting and takes only the answers
	// already there, so that it blocks the runner kvAckTimeout at most,
	// not kvAckTimeout per write. The writes not acknowledged stay dirty;
	// each may have landed, so the writer forgets the key's revision (the
	// next write conflicts and re-reads if it did).
	stalled, unacked := false, 0
	unanswered := func(p pending) {
		unacked++
		w.metrics.intentWrite(p.op, errNoAck)
		delete(w.written, p.dev)
	}
	defer func() {
		if unacked > 0 {
			w.log.ErrorContext(ctx, "write fleet-intent: no acknowledgement; the writes are retried", "devices", unacked, "timeout", kvAckTimeout)
		}
	}()
	settle := func(p pending) {
		if stalled {
			select {
			case ack := <-p.fut.Ok():
				done(p.op, p.dev, kvSlot{val: p.val, rev: ack.Sequence}, nil)
			case err := <-p.fut.Err():
				done(p.op, p.dev, kvSlot{}, err)
			default:
				unanswered(p)
			}
			return
		}
		select {
		case ack := <-p.fut.Ok():
			done(p.op, p.dev, kvSlot{val: p.val, rev: ack.Sequence}, nil)
		case err := <-p.fut.Err():
			done(p.op, p.dev, kvSlot{}, err)
		case <-time.After(kvAckTimeout):
			stalled = true
			unanswered(p)
		}
		// Not on ctx either: a write sent is answered before the runner
		// returns.
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
	var queued []kvWrite
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
				queued = append(queued, kvWrite{op: "put", dev: dev, val: val, rev: cur.rev})
			default:
				rev, err := w.kv.Update(ctx, dev, val, cur.rev)
				done("put", dev, kvSlot{val: string(val), rev: rev}, err)
			}
		case !ok && cur.val != "":
			if w.js != nil {
				queued = append(queued, kvWrite{op: "delete", dev: dev, rev: cur.rev})
				continue
			}
			err := w.kv.Delete(ctx, dev, jetstream.LastRevision(cur.rev))
			done("delete", dev, kvSlot{markerUnknown: true}, err)
		default:
			delete(dirty, dev)
		}
	}
	if len(queued) == 0 {
		return conflicted
	}
	// Atomic batches first; what they could not write goes one at a time.
	single := w.batches(ctx, queued, done, &stalled, func(q kvWrite) {
		unanswered(pending{op: q.op, dev: q.dev})
	})
	for _, q := range single {
		if ctx.Err() != nil {
			break // stopping: nothing new is sent
		}
		async(q.op, q.dev, string(q.val), q.msg(w.kv.Bucket()), q.rev)
	}
	for _, p := range inflight {
		settle(p)
	}
	return conflicted
}

// kvWrite is one conditional fleet-intent write: a put of val, or a
// delete, of dev's key, expected at revision rev.
type kvWrite struct {
	op, dev string
	val     []byte
	rev     uint64
}

// msg is the write's message on bucket's subject for dev (a delete is a
// marker with the KV-Operation header), without the condition.
func (q kvWrite) msg(bucket string) *nats.Msg {
	m := &nats.Msg{Subject: "$KV." + bucket + "." + q.dev, Data: q.val, Header: nats.Header{}}
	if q.op == "delete" {
		m.Data = nil
		m.Header.Set(kvOperationHeader, "DEL")
	}
	return m
}

// batchAnswer is the server's answer to the commit of an atomic batch: the
// stream sequence of its last message and how many it stored, or an error.
type batchAnswer struct {
	Seq   uint64              `json:"seq"`
	Batch string              `json:"batch"`
	Count int                 `json:"count"`
	Error *jetstream.APIError `json:"error"`
}

// batches writes queued in atomic batches of at most kvBatch, kvBatches
// batches in flight, settling each write of a stored batch through done. It
// returns the writes still to be made one at a time: every write of a batch
// the stream refused (a conflict on one of its keys, atomic publish not
// allowed, any other error), and all of them once atomic publish is known
// to be off. A batch not answered within kvAckTimeout (a stream without a
// leader) is left to unanswered, write by write, as a single write is;
// *stalled is shared with the single writes.
func (w *intentWriter) batches(ctx context.Context, queued []kvWrite, done func(op, dev string, slot kvSlot, err error), stalled *bool,
	unanswered func(kvWrite)) (single []kvWrite) {
	if w.noBatch || len(queued) < 2 {
		return queued
	}
	nc := w.js.Conn()
	inbox := nc.NewInbox()
	// The batch ids are unique per flush: the inbox's unique token and a
	// count.
	token := inbox[strings.LastIndexByte(inbox, '.')+1:]
	answers := make(chan *nats.Msg, kvBatches+1)
	sub, err := nc.ChanSubscribe(inbox+".*", answers)
	if err != nil {
		w.log.WarnContext(ctx, "write fleet-intent in batches: no inbox; writing one value at a time", "error", err)
		return queued
	}
	defer func() { _ = sub.Unsubscribe() }()
	type batch struct {
		id     string
		writes []kvWrite
	}
	var (
		inflight []batch
		early    = map[string]*nats.Msg{} // answers of later batches, by reply subject
	)
	// settle waits for the answer of the oldest batch in flight.
	settle := func() {
		b := inflight[0]
		inflight = inflight[1:]
		reply := inbox + "." + b.id
		m, ok := early[reply]
		delete(early, reply)
		var timeout <-chan time.Time
		if *stalled {
			timeout = closedTimeChan
		} else {
			t := time.NewTimer(kvAckTimeout)
			defer t.Stop()
			timeout = t.C
		}
		// Not on ctx: a batch sent is answered (or given up after
		// kvAckTimeout) even when the runner stops, so that it returns
		// with no batch of its own in flight.
		for !ok {
			select {
			case a := <-answers:
				if a.Subject == reply {
					m, ok = a, true
				} else {
					early[a.Subject] = a
				}
				continue
			case <-timeout:
				*stalled = true
				for _, q := range b.writes {
					unanswered(q)
				}
				return
			}

		}
		var ans batchAnswer
		if st := m.Header.Get("Status"); st != "" {
			ans.Error = &jetstream.APIError{Code: 503, Description: "no responders: the fleet-intent stream is unavailable"}
		} else if err := json.Unmarshal(m.Data, &ans); err != nil {
			ans.Error = &jetstream.APIError{Code: 500, Description: "unreadable answer to an atomic batch"}
		}
		switch {
		case ans.Error != nil && ans.Error.ErrorCode == errCodeAtomicPublishDisabled:
			if !w.noBatch {
				w.log.WarnContext(ctx, "the fleet-intent bucket does not allow atomic batches (provisioned by an earlier build): writing one value at a time; provision the streams again to batch")
			}
			w.noBatch = true
			single = append(single, b.writes...)
		case ans.Error != nil:
			// Stored whole or not at all: none of it was stored. One at a
			// time finds the key that conflicted.
			if !kvstore.Conflict(ans.Error) {
				w.log.WarnContext(ctx, "write fleet-intent: an atomic batch was refused; writing its values one at a time", "writes", len(b.writes), "error", ans.Error)
			}
			single = append(single, b.writes...)
		case ans.Batch != b.id || ans.Count != len(b.writes) || ans.Seq < uint64(len(b.writes)):
			// Not the answer of an atomic batch (a server that ignored the
			// batch headers stored what it could, one message at a time):
			// the revisions are unknown, so the keys are read again on
			// their next write, and the devices stay dirty for the next
			// flush.
			w.log.ErrorContext(ctx, "write fleet-intent: the server did not answer as for an atomic batch; the writes are retried one at a time",
				"writes", len(b.writes), "batch", ans.Batch, "count", ans.Count)
			w.noBatch = true
			for _, q := range b.writes {
				delete(w.written, q.dev)
				w.metrics.intentWrite(q.op, errNoAck)
			}
		default:
			// A batch is stored in one piece, in order: its first write
			// has sequence Seq-Count+1.
			first := ans.Seq - uint64(len(b.writes)) + 1
			for i, q := range b.writes {
				slot := kvSlot{val: string(q.val), rev: first + uint64(i)}
				done(q.op, q.dev, slot, nil)
			}
		}
	}
	for n, start := 0, 0; start < len(queued); start += kvBatch {
		writes := queued[start:min(start+kvBatch, len(queued))]
		if ctx.Err() != nil {
			// Stopping: no new batch. The writes stay dirty; flush sends
			// nothing more either.
			single = append(single, writes...)
			continue
		}
		if w.noBatch || len(writes) < 2 {
			single = append(single, writes...)
			continue
		}
		n++
		b := batch{id: token + "-" + strconv.Itoa(n), writes: writes}
		if err := w.publishBatch(nc, b.id, inbox+"."+b.id, writes); err != nil {
			// Never committed: the server drops the partial batch.
			w.log.WarnContext(ctx, "write fleet-intent: publish an atomic batch; writing its values one at a time", "error", err)
			single = append(single, writes...)
			continue
		}
		inflight = append(inflight, b)
		if len(inflight) >= kvBatches {
			settle()
		}
	}
	for len(inflight) > 0 {
		settle()
	}
	return single
}

// closedTimeChan is a channel that is always ready: no wait.
var closedTimeChan = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// publishBatch publishes writes as one atomic batch id, each conditional on
// its key's revision; the last commits it and asks for the answer on reply.
// The messages before it are core publishes without a reply (the server
// answers only the commit).
func (w *intentWriter) publishBatch(nc *nats.Conn, id, reply string, writes []kvWrite) error {
	for i, q := range writes {
		m := q.msg(w.kv.Bucket())
		m.Header.Set(hdrBatchID, id)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(q.rev, 10))
		if i == len(writes)-1 {
			m.Header.Set(hdrBatchCommit, "1")
			m.Reply = reply
		}
		if err := nc.PublishMsg(m); err != nil {
			return err
		}
	}
	return nil
}

// CheckpointObject is the name of the runner's snapshot in its Checkpoints
// object store.
const CheckpointObject = "rollout-runner"

// checkpointVersion is the version of the checkpoints this build writes and
// restores. 2: the intent source includes TaskRun intent (a version 1
// checkpoint's position passed TaskRun events it never folded, so it is
// rebuilt from the first event). 3: the folds keep the progress clock
// (each target's first report and first result, with the stream's stored
// time), which an earlier checkpoint lacks: it is rebuilt from the first
// event once. 4: the reports source reads the health reports too, and the
// checkpoint keeps each Deployment's degraded devices (ADR 0019): a
// version 3 position passed health reports it never read, so it is
// rebuilt once.
const checkpointVersion = 4

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
	// Health is each Deployment's degraded devices (version 4).
	Health map[string]*projections.Health `json:"health,omitempty"`
	// Fetched is each Deployment's devices that reported a revision's
	// images fetched ahead (ADR 0027); absent without prefetch.
	Fetched map[string]map[string]fetchedRev `json:"fetched,omitempty"`
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
	for k, h := range cp.Health {
		ns, name, _ := strings.Cut(k, "/")
		if h != nil {
			s.health[depKey{ns, name}] = h
		}
	}
	for k, m := range cp.Fetched {
		ns, name, _ := strings.Cut(k, "/")
		if s.fetched == nil {
			s.fetched = map[depKey]map[string]fetchedRev{}
		}
		s.fetched[depKey{ns, name}] = m
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
		RevisedAt: map[string]time.Time{}, Health: map[string]*projections.Health{}}
	for k, h := range s.health {
		cp.Health[k.ns+"/"+k.name] = h
	}
	for k, m := range s.fetched {
		if cp.Fetched == nil {
			cp.Fetched = map[string]map[string]fetchedRev{}
		}
		cp.Fetched[k.ns+"/"+k.name] = m
	}
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
