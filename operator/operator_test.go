package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../k8s/config/crd"}})
}

// env is one test's world: a namespace on the shared API server, an
// embedded JetStream and a way to start operators.
type env struct {
	t      testing.TB
	ctx    context.Context
	srv    *kubeapi.Server
	c      client.Client
	store  *events.Store
	ns     string
	groups operator.GroupSource
	kv     jetstream.KeyValue
	obj    jetstream.ObjectStore
	// openbao, when set, enables the pull-secret policy sync.
	openbao operator.PolicyAdmin
	// logs, when set, receives the operator's records at every level.
	logs slog.Handler
	// skips, when set, counts the records the operator skips.
	skips *events.SkipCounter
	// metrics, when set, are the operator's metrics.
	metrics *operator.Metrics
	// targetTimeout, when set, is the operator's target timeout.
	targetTimeout time.Duration
	// progressDeadline, when set, is the operator's progress deadline.
	progressDeadline time.Duration
	// deviceController runs the Device controller (fleet-identity, Device
	// status) on the env's store.
	deviceController bool
	// deviceWorkers is the operators' Options.DeviceWorkers (0: the default).
	deviceWorkers int
	// leaderElection is the operators' Options.LeaderElection (zero:
	// disabled).
	leaderElection operator.LeaderElection
	// followDebounce, when set, is the operators' Options.FollowDebounce.
	followDebounce time.Duration
}

var nsCounter int

// cluster gives a test the shared API server, a client that can watch, a
// fresh namespace named prefix-N, and a context bounded to two minutes.
func cluster(t testing.TB, prefix string) (context.Context, *kubeapi.Server, client.WithWatch, string) {
	t.Helper()
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	nsCounter++
	ns := fmt.Sprintf("%s-%d", prefix, nsCounter)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ctx, srv, c, ns
}

func newEnv(t testing.TB) *env {
	t.Helper()
	ctx, srv, c, ns := cluster(t, "op")
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := st.JetStream().ObjectStore(ctx, events.BucketOperatorState)
	if err != nil {
		t.Fatal(err)
	}
	// Every operator reconciles every namespace of the shared API server,
	// and device ids are unique across namespaces (the oldest Device of a
	// name serves it): a test's objects go with it, or the next test's
	// operators would act on them (revisions in their stores, namesakes
	// never targets). Registered before the operators' stops, so it runs
	// after them; the finalizers go first, no operator is left to act.
	t.Cleanup(func() { removeAll(t, c, ns) })
	return &env{t: t, ctx: ctx, srv: srv, c: c, store: st, ns: ns, kv: kv, obj: obj}
}

// startOperator runs an operator until the returned stop is called (or the
// test ends).
func (e *env) startOperator() (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if e.logs != nil {
		logger = slog.New(e.logs)
	}
	o := operator.Options{RESTConfig: e.srv.RESTConfig(), Store: e.store, Reader: e.store, IntentKV: e.kv, Checkpoints: e.obj,
		Groups: e.groups, Logger: logger, SeveralPerProcess: true, StatusInterval: 100 * time.Millisecond, OpenBao: e.openbao, Skips: e.skips,
		Metrics: e.metrics, TargetTimeout: e.targetTimeout, ProgressDeadline: e.progressDeadline, DeviceWorkers: e.deviceWorkers,
		LeaderElection: e.leaderElection, FollowDebounce: e.followDebounce}
	if e.deviceController {
		o.Devices = e.store
	}
	go func() { done <- operator.Run(ctx, o) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("operator.Run: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// deviceInCache waits until the operator's Device controller has decided
// Device name (its IdentityRegistered condition is set): the operator's
// cache, which the Deployment controller resolves targets from, holds it.
// A Deployment changed sooner may be resolved from a cache that does not
// yet (the Device and Deployment watches are apart). It needs
// e.deviceController.
func (e *env) deviceInCache(name string) {
	e.t.Helper()
	if !e.deviceController {
		e.t.Fatal("deviceInCache needs the Device controller (e.deviceController)")
	}
	e.waitFor("the operator to decide Device "+name, func() bool {
		var d fleetv1.Device
		if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: name}, &d); err != nil {
			return false
		}
		return meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionIdentityRegistered) != nil
	})
}

func (e *env) device(name string, labels map[string]string) *fleetv1.Device {
	e.t.Helper()
	d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns, Labels: labels},
		Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + name}}
	if err := e.c.Create(e.ctx, d); err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *env) deployment(name string, selector map[string]string, groups ...string) *fleetv1.Deployment {
	e.t.Helper()
	d := &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{
			AllowedGroups:  groups,
			TargetSelector: fleetv1.TargetSelector{MatchLabels: selector},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1", Ports: []string{"8080:8080"}}}}},
		},
	}
	if err := e.c.Create(e.ctx, d); err != nil {
		e.t.Fatal(err)
	}
	return d
}

// revisions returns every revision event of the Deployment, in order.
func (e *env) intent(name string) []events.Record {
	e.t.Helper()
	subj, _ := events.DeploymentIntentSubject(e.ns, name)
	var out []events.Record
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue // not an intent event (a test stored garbage here)
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	if err := testenv.Poll(e.ctx, 60*time.Second, cond); err != nil {
		e.t.Fatalf("%v waiting for %s", err, what)
	}
}

// revisionOf waits for the revision of generation gen and returns it.
func (e *env) revisionOf(name string, gen int64) events.DeploymentRevisionCreated {
	e.t.Helper()
	var rev events.DeploymentRevisionCreated
	e.waitFor(fmt.Sprintf("revision %d of %s", gen, name), func() bool {
		for _, r := range e.intent(name) {
			if d, err := events.Decode[events.DeploymentRevisionCreated](r.Event); err == nil && d.Generation == gen {
				rev = d
				return true
			}
		}
		return false
	})
	return rev
}

// update changes a Deployment's spec, retrying on conflicts with the
// operator's own writes (finalizer, status).
func (e *env) update(name string, change func(*fleetv1.Deployment)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := e.get(name)
		change(d)
		return e.c.Update(e.ctx, d)
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) get(name string) *fleetv1.Deployment {
	e.t.Helper()
	var d fleetv1.Deployment
	if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: name}, &d); err != nil {
		e.t.Fatal(err)
	}
	return &d
}

func TestRevisionFreezesTargetsAndCanaries(t *testing.T) {
	e := newEnv(t)
	e.deviceController = true // deviceInCache
	e.device("rpi-1", map[string]string{"role": "analyzer", "canary": "true"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	e.device("rpi-3", map[string]string{"role": "analyzer", "blacklist": "true"})
	e.device("rpi-4", map[string]string{"role": "other"})
	e.startOperator()
	d := e.deployment("api", map[string]string{"role": "analyzer"})

	rev := e.revisionOf("api", 1)
	if diff := cmp.Diff([]string{"rpi-1", "rpi-2"}, rev.Targets); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"rpi-1"}, rev.Canaries); diff != "" {
		t.Errorf("canaries (-want +got):\n%s", diff)
	}
	if rev.UID != string(d.UID) || rev.ScoreDigest == "" || rev.RevisionID == "" {
		t.Errorf("revision %+v", rev)
	}

	e.waitFor("status naming the revision", func() bool {
		s := e.get("api").Status
		return s.ObservedGeneration == 1 && s.Revision != nil && s.Revision.ID == rev.RevisionID
	})
	// TargetsResolved is the Deployment controller's, written apart
	// from the runner's status: waited for on its own.
	e.waitFor("TargetsResolved True, Resolved", func() bool {
		c := meta.FindStatusCondition(e.get("api").Status.Conditions, fleetv1.ConditionTargetsResolved)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == fleetv1.ReasonResolved
	})

	t.Run("a device labelled after the revision is not in it, and a spec change makes a revision that includes it", func(t *testing.T) {
		e.device("rpi-5", map[string]string{"role": "analyzer"})
		e.deviceInCache("rpi-5")
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
		rev2 := e.revisionOf("api", 2)
		if diff := cmp.Diff([]string{"rpi-1", "rpi-2", "rpi-5"}, rev2.Targets); diff != "" {
			t.Errorf("generation 2 targets (-want +got):\n%s", diff)
		}
		if rev2.ScoreDigest == rev.ScoreDigest {
			t.Error("the score changed but the digest did not")
		}
		first := e.intent("api")[0]
		d1, _ := events.Decode[events.DeploymentRevisionCreated](first.Event)
		if slices.Contains(d1.Targets, "rpi-5") {
			t.Error("the first revision grew a target after it was frozen")
		}
		e.waitFor("status following generation 2", func() bool { return e.get("api").Status.ObservedGeneration == 2 })
	})
}

func TestAllowedGroupsWithoutAGroupSourceMatchesNoDevice(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"}, "lab")

	rev := e.revisionOf("api", 1)
	if len(rev.Targets) != 0 {
		t.Errorf("targets %v, want none (fail closed)", rev.Targets)
	}
	e.waitFor("the condition saying why", func() bool {
		c := meta.FindStatusCondition(e.get("api").Status.Conditions, fleetv1.ConditionTargetsResolved)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1.ReasonNoGroupSource
	})
	t.Run("a revision without targets is Failed with Ready False NoTargets, never Succeeded", func(t *testing.T) {
		d := e.waitPhase("api", fleetv1.PhaseFailed)
		if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse ||
			c.Reason != fleetv1.ReasonNoTargets || c.ObservedGeneration != 1 {
			t.Errorf("Ready condition %+v, want False/%s of generation 1", c, fleetv1.ReasonNoTargets)
		}
		if d.Status.ObservedGeneration != 1 || d.Status.Counts.Total != 0 {
			t.Errorf("observedGeneration %d, counts %+v", d.Status.ObservedGeneration, d.Status.Counts)
		}
		if diff := cmp.Diff([]events.Type{events.TypeRolloutStarted, events.TypeRolloutFailed}, e.transitions("api")); diff != "" {
			t.Errorf("transitions (-want +got):\n%s", diff)
		}
	})
}

func TestAllowedGroupsWithAGroupSource(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	e.groups = operator.NewStaticGroups(map[string]map[string][]string{e.ns: {"lab": {"rpi-2"}, "other": {"rpi-1"}}})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"}, "lab")
	if rev := e.revisionOf("api", 1); !slices.Equal(rev.Targets, []string{"rpi-2"}) {
		t.Errorf("targets %v, want only the lab member", rev.Targets)
	}
}

func TestExactlyOneRevisionPerGenerationAcrossRestartsAndRacingOperators(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	// Two operators race for every generation.
	stopA := e.startOperator()
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)

	stopA() // one operator goes away mid-life
	e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	e.revisionOf("api", 2)
	e.startOperator() // and a fresh one starts
	e.waitFor("status of generation 2", func() bool { return e.get("api").Status.ObservedGeneration == 2 })

	perGen := map[int64]int{}
	for _, r := range e.intent("api") {
		if d, err := events.Decode[events.DeploymentRevisionCreated](r.Event); err == nil {
			perGen[d.Generation]++
		}
	}
	if diff := cmp.Diff(map[int64]int{1: 1, 2: 1}, perGen); diff != "" {
		t.Errorf("revision events per generation (-want +got):\n%s", diff)
	}
}

func TestDeletionAppendsTheRemovalIntent(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.startOperator()
	d := e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	e.waitFor("the finalizer", func() bool { return slices.Contains(e.get("api").Finalizers, fleetv1.FinalizerDeployment) })
	if err := e.c.Delete(e.ctx, d); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the Deployment to go", func() bool {
		var got fleetv1.Deployment
		err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: "api"}, &got)
		return client.IgnoreNotFound(err) == nil && err != nil
	})
	recs := e.intent("api")
	last := recs[len(recs)-1]
	del, err := events.Decode[events.DeploymentDeleted](last.Event)
	if err != nil || del.UID != string(d.UID) {
		t.Errorf("last intent event %s (%v), want deployment.deleted of %s", last.Event.Type, err, d.UID)
	}
	deletions := 0
	for _, r := range recs {
		if r.Event.Type == events.TypeDeploymentDeleted {
			deletions++
		}
	}
	if deletions != 1 {
		t.Errorf("%d deletion events, want 1", deletions)
	}
}

func TestResolveTargetsIsPure(t *testing.T) {
	// A unit check of one step: the same inputs always give the same sorted
	// answer, whatever the list order.
	devs := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"r": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"r": "x", "canary": "true"}}},
	}
	d := &fleetv1.Deployment{Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"r": "x"}}}}
	r1, err := operator.ResolveTargets(context.Background(), d, devs, nil)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(devs)
	r2, _ := operator.ResolveTargets(context.Background(), d, devs, nil)
	if diff := cmp.Diff(r1, r2); diff != "" || !slices.Equal(r1.Targets, []string{"a", "b"}) {
		t.Errorf("%+v vs %+v", r1, r2)
	}
}

func TestAConditionKeepsItsTransitionTimeUntilItsStatusChanges(t *testing.T) {
	e := newEnv(t)
	e.deviceController = true // deviceInCache
	e.startOperator()
	e.deployment("api", map[string]string{"role": "ltt"})
	resolved := func(gen int64) metav1.Condition {
		t.Helper()
		var c *metav1.Condition
		e.waitFor(fmt.Sprintf("TargetsResolved of generation %d", gen), func() bool {
			c = meta.FindStatusCondition(e.get("api").Status.Conditions, fleetv1.ConditionTargetsResolved)
			return c != nil && c.ObservedGeneration == gen
		})
		return *c
	}
	newImage := func(tag string) {
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:" + tag })
	}
	// Transition times have seconds: each write below waits until the
	// clock is past the first one's second, so a reset transition time
	// shows.
	var first0 time.Time
	pastFirst := func() {
		t.Helper()
		e.waitFor("the clock to pass the first transition's second", func() bool {
			return time.Now().After(first0.Add(time.Second))
		})
	}

	first := resolved(1)
	if first.Status != metav1.ConditionFalse || first.Reason != fleetv1.ReasonNoMatchingDevices {
		t.Fatalf("generation 1: TargetsResolved %+v, want False/%s", first, fleetv1.ReasonNoMatchingDevices)
	}
	first0 = first.LastTransitionTime.Time
	pastFirst()
	newImage("v2")
	second := resolved(2)
	if second.Status != metav1.ConditionFalse || !second.LastTransitionTime.Equal(&first.LastTransitionTime) {
		t.Errorf("generation 2 (same outcome): TargetsResolved %+v, want False since %s", second, first.LastTransitionTime)
	}

	e.device("ltt-1", map[string]string{"role": "ltt"})
	e.deviceInCache("ltt-1")
	pastFirst()
	newImage("v3")
	third := resolved(3)
	if third.Status != metav1.ConditionTrue || !first.LastTransitionTime.Before(&third.LastTransitionTime) {
		t.Errorf("generation 3 (status flips): TargetsResolved %+v, want True since after %s", third, first.LastTransitionTime)
	}
}

// removeAll deletes a test's Deployments, TaskRuns and Devices, finalizers
// dropped; within 30 s, and 50 ms more per object (a benchmark's thousands
// of Devices).
func removeAll(t testing.TB, c client.Client, ns string) {
	lists := []client.ObjectList{&fleetv1.DeploymentList{}, &fleetv1.TaskRunList{}, &fleetv1.DeviceList{}}
	for _, l := range lists {
		lctx, lcancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.List(lctx, l, client.InNamespace(ns))
		lcancel()
		if err != nil {
			t.Errorf("list the test's objects: %v", err)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+time.Duration(meta.LenList(l))*50*time.Millisecond)
		defer cancel()
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			obj := o.(client.Object)
			if len(obj.GetFinalizers()) > 0 {
				patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
				obj.SetFinalizers(nil)
				if err := c.Patch(ctx, obj, patch); client.IgnoreNotFound(err) != nil {
					t.Errorf("drop the finalizers of %s: %v", obj.GetName(), err)
				}
			}
			if err := c.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
				t.Errorf("delete %s: %v", obj.GetName(), err)
			}
			return nil
		})
	}
}
