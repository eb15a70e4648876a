package history_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// statusRecorder is the rollout runner's Deployment status writer: it
// records the last status written per Deployment.
type statusRecorder struct {
	mu     sync.Mutex
	status map[string]fleetv1.DeploymentStatus // namespace/name → last written; guarded by mu
}

// WriteDeploymentStatus records st as the API server would store it (a
// JSON round trip: times in whole seconds).
func (c *statusRecorder) WriteDeploymentStatus(_ context.Context, namespace, name string, st fleetv1.DeploymentStatus) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	var stored fleetv1.DeploymentStatus
	if err := json.Unmarshal(b, &stored); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status[namespace+"/"+name] = stored
	return nil
}

func (c *statusRecorder) get(ns, name string) (fleetv1.DeploymentStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st, ok := c.status[ns+"/"+name]
	return st, ok
}

func (c *statusRecorder) all() map[string]fleetv1.DeploymentStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]fleetv1.DeploymentStatus{}
	for k, v := range c.status {
		out[k] = *v.DeepCopy()
	}
	return out
}

// fleetRun is a live fleet: an embedded server, the operator's real rollout
// runner, and the test playing the Deployment controller (revisions,
// deletions) and the agents (reports, heartbeats, inventory, commands).
type fleetRun struct {
	t        *testing.T
	ctx      context.Context
	store    *events.Store
	kv       jetstream.KeyValue
	statuses *statusRecorder
	// reported is the latest workload report per device and Deployment, as
	// the agents sent them.
	reported map[string]map[string]history.Report
}

func startFleet(t *testing.T) *fleetRun {
	t.Helper()
	return startFleetWithin(t, 3*time.Minute)
}

// startFleetWithin is startFleet for a test that runs up to d.
func startFleetWithin(t *testing.T, d time.Duration) *fleetRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	rec := &statusRecorder{status: map[string]fleetv1.DeploymentStatus{}}
	runner := &operator.RolloutRunner{Store: st, Reader: st, KV: kv, Status: rec, Log: slog.New(slog.DiscardHandler),
		StatusInterval: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("rollout runner: %v", err)
		}
	})
	return &fleetRun{t: t, ctx: ctx, store: st, kv: kv, statuses: rec, reported: map[string]map[string]history.Report{}}
}

// append stores an event as its writer does: the control plane appends,
// an agent reports (natstest.Write).
func (f *fleetRun) append(keys events.Keys, d events.Data, opts ...events.Option) events.Event {
	f.t.Helper()
	ev, err := events.New(keys, d, opts...)
	if err != nil {
		f.t.Fatal(err)
	}
	natstest.Write(f.t, f.ctx, f.store, ev)
	return ev
}

// revision appends a revision as the Deployment controller does.
func (f *fleetRun) revision(name, uid string, gen int64, targets, canaries []string) events.DeploymentRevisionCreated {
	f.t.Helper()
	rev := events.DeploymentRevisionCreated{UID: uid, Generation: gen, RevisionID: fmt.Sprintf("%d-%s", gen, uid[:4]),
		ScoreDigest: fmt.Sprintf("sha256:%s%d", name, gen), Score: json.RawMessage(fmt.Sprintf(`{"type":"PodmanV0","data":{"image":"%s:v%d"}}`, name, gen)),
		Targets: targets, Canaries: canaries}
	f.append(events.Keys{Namespace: "lab", Name: name}, rev, events.WithCorrelation(uid, gen))
	return rev
}

// report stores a workload report as an agent does.
func (f *fleetRun) report(device, name string, rev events.DeploymentRevisionCreated, phase events.WorkloadPhase, errText string, since time.Time) {
	f.t.Helper()
	d := events.WorkloadStatus{Namespace: "lab", Deployment: name, UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID,
		Phase: phase, Error: errText, Since: since.UTC()}
	ev := f.append(events.Keys{Device: device}, d, events.WithCorrelation(rev.UID, rev.Generation))
	if f.reported[device] == nil {
		f.reported[device] = map[string]history.Report{}
	}
	// The latest in stream order, whatever the device's clock says.
	f.reported[device][name] = history.Report{Namespace: "lab", Deployment: name, UID: rev.UID, Generation: rev.Generation,
		RevisionID: rev.RevisionID, Phase: phase, Error: errText, Since: since.UTC(), ID: ev.ID.String()}
}

func (f *fleetRun) waitFor(what string, cond func() bool) {
	f.t.Helper()
	if err := testenv.Poll(f.ctx, 60*time.Second, cond); err != nil {
		f.t.Fatalf("%v waiting for %s; statuses %+v", err, what, f.statuses.all())
	}
}

func (f *fleetRun) waitPhase(name string, gen int64, phase fleetv1.DeploymentPhase) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("%s generation %d %s", name, gen, phase), func() bool {
		st, ok := f.statuses.get("lab", name)
		return ok && st.Revision != nil && st.Revision.Generation == gen && st.Phase == phase
	})
}

// intents reads the whole fleet-intent bucket.
func (f *fleetRun) intents() map[string][]events.IntentEntry {
	f.t.Helper()
	out := map[string][]events.IntentEntry{}
	keys, err := f.kv.ListKeys(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	for k := range keys.Keys() {
		e, err := f.kv.Get(f.ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			f.t.Fatal(err)
		}
		var v events.DeviceIntent
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			f.t.Fatal(err)
		}
		out[k] = v.Deployments
	}
	return out
}

func (f *fleetRun) intentGen(device, name string) int64 {
	for _, e := range f.intents()[device] {
		if e.Name == name {
			return e.Generation
		}
	}
	return 0
}

// instant is what was live at one time T.
type instant struct {
	name     string
	at       time.Time
	intents  map[string][]events.IntentEntry
	statuses map[string]fleetv1.DeploymentStatus
	reported map[string][]history.Report
}

// record takes the live state once the runner has settled.
func (f *fleetRun) record(name string) instant {
	f.t.Helper()
	in := instant{name: name, intents: f.intents(), statuses: f.statuses.all(), reported: map[string][]history.Report{}}
	for dev, byDep := range f.reported {
		for _, dep := range []string{"api", "web"} {
			if r, ok := byDep[dep]; ok {
				in.reported[dev] = append(in.reported[dev], r)
			}
		}
	}
	in.at = time.Now()
	return in
}
