package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

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
type intentWriter struct {
	kv jetstream.KeyValue
	// js, when set, publishes the puts asynchronously (a window of
	// acknowledgements in flight); nil: one synchronous put per device.
	js      jetstream.JetStream
	log     *slog.Logger
	metrics *Metrics
	// written is the value last put per device.
	written map[string]string
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

// sync makes the bucket equal to the fold once caught up: it reads what
// the bucket holds, then puts values that differ and deletes keys of
// devices with nothing to run.
func (w *intentWriter) sync(ctx context.Context, intent *projections.Intent, dirty map[string]bool) error {
	keys, err := w.kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("rollout runner: list fleet-intent keys: %w", err)
	}
	for k := range keys.Keys() {
		e, err := w.kv.Get(ctx, k)
		if err == nil {
			w.written[k] = string(e.Value())
		}
		dirty[k] = true
	}
	for _, d := range intent.Devices() {
		dirty[d] = true
	}
	w.flush(ctx, intent, dirty)
	return nil
}

// flush writes the values of the dirty devices that changed and forgets
// each device it wrote; a put that fails stays dirty for the next flush.
func (w *intentWriter) flush(ctx context.Context, intent *projections.Intent, dirty map[string]bool) {
	// With js the puts are asynchronous, at most kvWindow in flight: a
	// release to N devices costs about one round trip per window instead of
	// one per device.
	type put struct {
		dev, val string
		fut      jetstream.PubAckFuture
	}
	var inflight []put
	// A put published while the bucket's stream has no leader (a cluster
	// electing one) is never answered: once no acknowledgement came for
	// kvAckTimeout, the flush stops waiting and takes only the answers
	// already there, so that it blocks the runner kvAckTimeout at most,
	// not kvAckTimeout per put. The puts not acknowledged stay dirty.
	stalled, unacked := false, 0
	settle := func(p put) {
		var timeout <-chan time.Time
		if !stalled {
			timeout = time.After(kvAckTimeout)
		} else {
			closed := make(chan time.Time)
			close(closed)
			timeout = closed
		}
		select {
		case <-p.fut.Ok():
			w.written[p.dev] = p.val
			delete(dirty, p.dev)
			w.metrics.intentWrite("put", nil)
		case err := <-p.fut.Err():
			w.log.ErrorContext(ctx, "put fleet-intent", "device", p.dev, "error", err)
			w.metrics.intentWrite("put", err)
		case <-timeout:
			stalled = true
			unacked++
			w.metrics.intentWrite("put", errNoAck)
		case <-ctx.Done():
		}
	}
	defer func() {
		if unacked > 0 {
			w.log.ErrorContext(ctx, "put fleet-intent: no acknowledgement; the puts are retried", "devices", unacked, "timeout", kvAckTimeout)
		}
	}()
	for dev := range dirty {
		val, ok := intent.Value(dev)
		prev, had := w.written[dev]
		switch {
		case ok && (!had || prev != string(val)):
			if w.js != nil {
				fut, err := w.js.PublishAsync("$KV."+w.kv.Bucket()+"."+dev, val)
				if err != nil {
					w.log.ErrorContext(ctx, "put fleet-intent", "device", dev, "error", err)
					w.metrics.intentWrite("put", err)
					continue
				}
				inflight = append(inflight, put{dev: dev, val: string(val), fut: fut})
				if len(inflight) >= kvWindow {
					settle(inflight[0])
					inflight = inflight[1:]
				}
				continue
			}
			_, err := w.kv.Put(ctx, dev, val)
			w.metrics.intentWrite("put", err)
			if err != nil {
				w.log.ErrorContext(ctx, "put fleet-intent", "device", dev, "error", err)
				continue
			}
			w.written[dev] = string(val)
		case !ok && had:
			err := w.kv.Delete(ctx, dev)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				err = nil
			}
			w.metrics.intentWrite("delete", err)
			if err != nil {
				w.log.ErrorContext(ctx, "delete fleet-intent", "device", dev, "error", err)
				continue
			}
			delete(w.written, dev)
		}
		delete(dirty, dev)
	}
	for _, p := range inflight {
		settle(p)
	}
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
