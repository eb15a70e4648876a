package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/score"
)

// Log records the failover test waits for in an operator's text logs.
const (
	logLeading = "leading: the controllers and runners start"
	logLive    = "rollout runner caught up"
)

// runs numbers the namespaces of this process's tests (the API server is
// shared, and -count runs a test again).
var runs atomic.Int32

// fresh returns a namespace name no other test of this process uses.
func fresh(prefix string) string { return fmt.Sprintf("%s-%d", prefix, runs.Add(1)) }

// buildOperator builds this command into a temporary directory.
func buildOperator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleet-operator")
	began := time.Now()
	cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Logf("built fleet-operator in %s", time.Since(began).Round(time.Millisecond))
	return bin
}

// opProc is a running fleet-operator process and its logs.
type opProc struct {
	name string
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	done chan error
}

// startOperator runs bin with args; it is killed when the test ends.
func startOperator(t *testing.T, name, bin string, args ...string) *opProc {
	t.Helper()
	p := &opProc{name: name, cmd: exec.Command(bin, args...), logs: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("logs of operator %s:\n%s", p.name, p.logs.String())
		}
	})
	return p
}

func (p *opProc) said(record string) bool { return strings.Contains(p.logs.String(), record) }

// failoverWorld is the failover test's clients: the API server's and the
// event store's.
type failoverWorld struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
	st  *events.Store
	kv  jetstream.KeyValue
	ns  string
}

func (w *failoverWorld) waitFor(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	if err := testenv.Poll(w.ctx, timeout, cond); err != nil {
		w.t.Fatalf("%v waiting for %s", err, what)
	}
}

// generationIn is the generation of Deployment name in a device's
// fleet-intent value (0: none).
func (w *failoverWorld) generationIn(device, name string) int64 {
	e, err := w.kv.Get(w.ctx, device)
	if err != nil {
		return 0
	}
	var v events.DeviceIntent
	if json.Unmarshal(e.Value(), &v) != nil {
		return 0
	}
	for _, d := range v.Deployments {
		if d.Namespace == w.ns && d.Name == name {
			return d.Generation
		}
	}
	return 0
}

// report stores a device's workload status as a simulated device (and an
// agent) does: a core publish on its report subject, waited for until
// stored.
func (w *failoverWorld) report(device string, rev events.DeploymentRevisionCreated, phase events.WorkloadPhase) {
	w.t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.WorkloadStatus{Namespace: w.ns, Deployment: "api", UID: rev.UID,
		Generation: rev.Generation, RevisionID: rev.RevisionID, Phase: phase, Since: time.Now().UTC()},
		events.WithCorrelation(rev.UID, rev.Generation))
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.st.Report(w.ctx, ev); err != nil {
		w.t.Fatal(err)
	}
}

func (w *failoverWorld) deployment() *fleetv1.Deployment {
	w.t.Helper()
	var d fleetv1.Deployment
	if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "api"}, &d); err != nil {
		w.t.Fatal(err)
	}
	return &d
}

// rebuild folds the three streams the rollout runner reads from their
// first event, one stream after the other, into fresh projections.
func (w *failoverWorld) rebuild() (*projections.Intent, map[events.Keys]projections.Rollout) {
	w.t.Helper()
	intent, rollouts := projections.NewIntent(), map[events.Keys]projections.Rollout{}
	for _, filter := range []string{"fleet.intent.*.*.*", "fleet.rollout.deployment.*.*", "fleet.report.*.workload"} {
		for r, err := range w.st.Replay(w.ctx, filter, events.FromStart()) {
			if err != nil {
				w.t.Fatal(err)
			}
			k := r.Event.Keys
			if r.Event.Type == events.TypeWorkloadStatus {
				d, err := events.Decode[events.WorkloadStatus](r.Event)
				if err != nil {
					w.t.Fatal(err)
				}
				k = events.Keys{Namespace: d.Namespace, Name: d.Deployment}
			} else {
				intent.Apply(r.Event)
			}
			// With the stream's stored time, as the runner folds it (the
			// progress clock).
			ro, p := rollouts[k], projections.NewStoredPayload(r)
			ro.FoldPayload(&p)
			rollouts[k] = ro
		}
	}
	return intent, rollouts
}

// TestWhenTheLeaderIsKilledMidRolloutTheOtherReplicaTakesOverAndTheRolloutCompletesOnce
// runs two real fleet-operator processes with leader election against one
// API server and one JetStream, SIGKILLs the leader during the canary stage
// and checks the takeover time against the product's bound, that every
// transition is appended once, and that the fleet-intent values and the
// status equal a rebuild from the streams; then it stops the new leader
// with SIGTERM and checks that a third replica leads at its next try (the
// Lease was released).
func TestWhenTheLeaderIsKilledMidRolloutTheOtherReplicaTakesOverAndTheRolloutCompletesOnce(t *testing.T) {
	srv := kubeapi.Shared(t)
	nsrv := natstest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildOperator(t)

	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	st, err := events.NewStore(natstest.Connect(t, nsrv), events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := &failoverWorld{t: t, ctx: ctx, c: c, st: st, ns: fresh("failover")}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}); err != nil {
		t.Fatal(err)
	}
	// Device ids are global: the namespace makes them this run's.
	canary, others := w.ns+"-canary", []string{w.ns + "-2", w.ns + "-3"}
	for _, id := range append([]string{canary}, others...) {
		labels := map[string]string{"role": "failover"}
		if id == canary {
			labels["canary"] = "true"
		}
		d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: w.ns, Labels: labels},
			Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + id}}
		if err := c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	// Short leases keep the test short; the bounds are the product's.
	le := operator.LeaderElection{Enabled: true, Namespace: w.ns, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second,
		RetryPeriod: time.Second}
	args := []string{"--kubeconfig", srv.KubeconfigPath(), "--nats-url", nsrv.ClientURL(), "--log-format", "text",
		"--status-interval", "200ms", "--leader-election-namespace", le.Namespace,
		"--leader-election-lease-duration", le.LeaseDuration.String(), "--leader-election-renew-deadline", le.RenewDeadline.String(),
		"--leader-election-retry-period", le.RetryPeriod.String()}
	procs := []*opProc{startOperator(t, "a", bin, args...), startOperator(t, "b", bin, args...)}
	var leader, follower *opProc
	w.waitFor("one operator to lead", 60*time.Second, func() bool {
		for i, p := range procs {
			if p.said(logLeading) {
				leader, follower = p, procs[1-i]
				return true
			}
		}
		return false
	})
	var lease coordinationv1.Lease
	if err := c.Get(ctx, types.NamespacedName{Namespace: w.ns, Name: operator.LeaseName}, &lease); err != nil {
		t.Fatalf("the Lease: %v", err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("the Lease has no holder: %+v", lease.Spec)
	}
	w.kv, err = st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}

	dep := &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: w.ns},
		Spec: fleetv1.DeploymentSpec{
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "failover"}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1", Ports: []string{"8080:8080"}}}}},
		},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	intentSubject, _ := events.DeploymentIntentSubject(w.ns, "api")
	var rev events.DeploymentRevisionCreated
	w.waitFor("the revision", 60*time.Second, func() bool {
		rec, err := st.Last(ctx, intentSubject)
		if err != nil {
			return false
		}
		rev, err = events.Decode[events.DeploymentRevisionCreated](rec.Event)
		return err == nil
	})
	w.waitFor("the canary's intent", 60*time.Second, func() bool { return w.generationIn(canary, "api") == 1 })
	w.report(canary, rev, events.WorkloadApplying)
	w.waitFor("the canary stage in the status", 60*time.Second, func() bool { return w.deployment().Status.Phase == fleetv1.PhaseCanary })
	if follower.said(logLive) || follower.said(logLeading) {
		t.Fatal("the follower runs the rollout runner before it leads")
	}

	// SIGKILL: the leader neither releases the Lease nor saves a checkpoint.
	if err := leader.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-leader.done
	leader.done <- nil                              // for the cleanup
	w.report(canary, rev, events.WorkloadConverged) // stored while no operator leads

	// The Kubernetes API's latency (two requests on a loaded machine) is on
	// top of the product's bound.
	const apiLatency = time.Second
	bound := le.TakeoverBound()
	w.waitFor("the follower to lead", bound+time.Minute, func() bool { return follower.said(logLeading) })
	takeover := time.Since(killed)
	t.Logf("takeover %s after the SIGKILL (bound %s = lease duration %s + 4.4 × retry period %s)",
		takeover.Round(10*time.Millisecond), bound, le.LeaseDuration, le.RetryPeriod)
	if takeover > bound+apiLatency {
		t.Errorf("the follower led %s after the leader's death, past the bound %s (+%s API latency)", takeover, bound, apiLatency)
	}

	for _, id := range others {
		w.waitFor("release to "+id, 60*time.Second, func() bool { return w.generationIn(id, "api") == 1 })
		w.report(id, rev, events.WorkloadApplying)
		w.report(id, rev, events.WorkloadConverged)
	}
	w.waitFor("the rollout to succeed", 60*time.Second, func() bool {
		s := w.deployment().Status
		c := meta.FindStatusCondition(s.Conditions, fleetv1.ConditionReady)
		return s.Phase == fleetv1.PhaseSucceeded && c != nil && c.Status == metav1.ConditionTrue
	})
	t.Logf("succeeded %s after the SIGKILL", time.Since(killed).Round(10*time.Millisecond))

	t.Run("every transition of the revision is appended exactly once", func(t *testing.T) {
		subj, _ := events.DeploymentRolloutSubject(w.ns, "api")
		var got []events.Type
		for r, err := range st.Replay(ctx, subj, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Event.Correlation.Generation != rev.Generation {
				t.Errorf("transition %s of generation %d", r.Event.Type, r.Event.Correlation.Generation)
			}
			got = append(got, r.Event.Type)
		}
		want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
			events.TypeRolloutReleased, events.TypeRolloutSucceeded}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("transitions (-want +got):\n%s", diff)
		}
	})

	t.Run("the exposure index holds every report's records once across the failover", func(t *testing.T) {
		// What the index must hold: the reports folded once.
		var want []events.IndexWrite
		var last uint64
		x := &history.ExposureIndexer{}
		for r, err := range st.ReplaySubjects(ctx, []string{"fleet.report.*.workload", "fleet.report.*.health"}, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			writes, err := x.Fold(r)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, writes...)
			last = r.Sequence
		}
		if len(want) == 0 {
			t.Fatal("the reports fold into no index record: the comparison would say nothing")
		}
		w.waitFor("the index to cover every report", 60*time.Second, func() bool {
			rec, err := st.IndexLast(ctx)
			return err == nil && rec.Record.Source == last && rec.Record.Last
		})
		var got []events.IndexWrite
		for _, r := range natstest.ExposureIndex(t, ctx, st) {
			got = append(got, events.IndexWrite{Subject: r.Subject, Record: r.Record})
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the exposure index (-the reports folded once +written by the two leaders):\n%s", diff)
		}
	})

	t.Run("the fleet-intent values and the status equal a rebuild from the streams", func(t *testing.T) {
		intent, rollouts := w.rebuild()
		want := map[string]string{}
		for _, d := range intent.Devices() {
			v, _ := intent.Value(d)
			want[d] = string(v)
		}
		got := map[string]string{}
		keys, err := w.kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range keys.Keys() {
			e, err := w.kv.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			got[k] = string(e.Value())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("fleet-intent values (-rebuild +live):\n%s", diff)
		}

		rebuilt, ok := rollouts[events.Keys{Namespace: w.ns, Name: "api"}].Status()
		if !ok {
			t.Fatal("the rebuild has no status")
		}
		// Through JSON, as the API server stores it (times in seconds).
		var wantSt fleetv1.DeploymentStatus
		if b, err := json.Marshal(rebuilt); err != nil || json.Unmarshal(b, &wantSt) != nil {
			t.Fatalf("round trip: %v", err)
		}
		live := w.deployment().Status
		// The rollout runner's fields (Ready, Progressing); TargetsResolved
		// is the Deployment controller's.
		live.Conditions = slices.DeleteFunc(live.Conditions, func(c metav1.Condition) bool {
			return c.Type != fleetv1.ConditionReady && c.Type != fleetv1.ConditionProgressing
		})
		if diff := cmp.Diff(wantSt, live); diff != "" {
			t.Errorf("status (-rebuild +live):\n%s", diff)
		}
	})

	t.Run("a leader stopped with SIGTERM releases the Lease and a new replica leads within 2.2 retry periods", func(t *testing.T) {
		next := startOperator(t, "c", bin, args...)
		w.waitFor("the new replica to try the Lease", 60*time.Second, func() bool { return next.said("Attempting to acquire leader lease") })
		if err := follower.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := <-follower.done; err != nil {
			t.Errorf("the leader stopped with %v, want exit 0", err)
		}
		follower.done <- nil // for the cleanup
		exited := time.Now()
		w.waitFor("the new replica to lead", time.Minute, func() bool { return next.said(logLeading) })
		took := time.Since(exited)
		limit := time.Duration(2.2*float64(le.RetryPeriod)) + apiLatency
		t.Logf("led %s after the old leader exited (limit %s)", took.Round(10*time.Millisecond), limit)
		if took > limit {
			t.Errorf("the new replica led %s after the old leader exited, past %s: was the Lease released?", took, limit)
		}
	})
}
