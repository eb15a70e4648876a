package operator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// requests returns the rollout requests (paused, resumed, approved) on the
// Deployment's rollout subject, in order.
func (e *env) requests(name string) []events.RolloutTransition {
	e.t.Helper()
	subj, _ := events.DeploymentRolloutSubject(e.ns, name)
	var out []events.RolloutTransition
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		switch r.Event.Type {
		case events.TypeRolloutPaused, events.TypeRolloutResumed, events.TypeRolloutApproved:
			tr, err := events.Decode[events.RolloutTransition](r.Event)
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, tr)
		}
	}
	return out
}

// annotate writes the rollout-action annotation as the admin.
func (e *env) annotate(name, value string) {
	e.t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{fleetv1.AnnotationRolloutAction: value}}})
	if err != nil {
		e.t.Fatal(err)
	}
	d := &fleetv1.Deployment{}
	d.Name, d.Namespace = name, e.ns
	if err := e.c.Patch(e.ctx, d, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.t.Fatal(err)
	}
}

func request(action string, generation int64, batch int, by, id string) string {
	a := fleetv1.RolloutAction{Action: fleetv1.RolloutActionKind(action), Generation: generation, Batch: batch, By: by, Request: id}
	s, err := a.Encode()
	if err != nil {
		panic(err)
	}
	return s
}

// warnings lists the reasons and notes of the Warning Events on a
// Deployment.
func (e *env) warnings(name string) []string {
	e.t.Helper()
	s := runtime.NewScheme()
	if err := eventsv1.AddToScheme(s); err != nil {
		e.t.Fatal(err)
	}
	c, err := client.New(e.srv.RESTConfig(), client.Options{Scheme: s})
	if err != nil {
		e.t.Fatal(err)
	}
	var list eventsv1.EventList
	if err := c.List(e.ctx, &list, client.InNamespace(e.ns)); err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Type == "Warning" && ev.Regarding.Kind == "Deployment" && ev.Regarding.Name == name {
			out = append(out, ev.Reason+": "+ev.Note)
		}
	}
	return out
}

func TestRolloutRequestsAreRecordedWithWhoAskedThem(t *testing.T) {
	e := newEnv(t)
	e.startOperator()
	d := e.deployment("api", map[string]string{"role": "analyzer"})
	rev := e.revisionOf("api", 1)

	steps := []struct {
		name       string
		annotation string
		want       events.RolloutTransition
		wantType   events.Type
	}{
		{"a pause is recorded with who asked it", request("pause", 1, 0, "alice", "r1"),
			events.RolloutTransition{By: "alice", Request: "r1"}, events.TypeRolloutPaused},
		{"an approval is recorded with its batch", request("approve", 1, 2, "bob@example.com", "r2"),
			events.RolloutTransition{By: "bob@example.com", Request: "r2", Batch: 2}, events.TypeRolloutApproved},
		{"a resume is recorded", request("resume", 1, 0, "alice", "r3"),
			events.RolloutTransition{By: "alice", Request: "r3"}, events.TypeRolloutResumed},
	}
	for i, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			e.annotate("api", s.annotation)
			var got []events.RolloutTransition
			e.waitFor("request "+s.want.Request, func() bool { got = e.requests("api"); return len(got) > i })
			want := s.want
			want.UID, want.Generation, want.RevisionID = string(d.UID), 1, rev.RevisionID
			if diff := cmp.Diff(want, got[i], cmpopts.IgnoreUnexported(events.RolloutTransition{})); diff != "" {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
			if got[i].EventType() != s.wantType {
				t.Errorf("recorded a %s, want %s", got[i].EventType(), s.wantType)
			}
		})
	}

	warned := []struct {
		name, annotation, reason string
		want                     []string
	}{
		{"a malformed request appends nothing and is answered by a Warning naming the field", `{"action":"stop","generation":1,"by":"alice","request":"r4"}`,
			operator.EventReasonRolloutActionInvalid, []string{`"action" is "stop"`, `"pause", "resume" or "approve"`}},
		{"a request for another generation appends nothing and is answered by a Warning naming both", request("pause", 7, 0, "alice", "r5"),
			operator.EventReasonRolloutActionStale, []string{"r5", "generation 7", "at generation 1"}},
	}
	for _, w := range warned {
		t.Run(w.name, func(t *testing.T) {
			e.annotate("api", w.annotation)
			var found string
			e.waitFor("a Warning "+w.reason, func() bool {
				for _, s := range e.warnings("api") {
					if strings.HasPrefix(s, w.reason+":") {
						found = s
						return true
					}
				}
				return false
			})
			for _, s := range w.want {
				if !strings.Contains(found, s) {
					t.Errorf("Warning %q does not say %q", found, s)
				}
			}
		})
	}
	if got := e.requests("api"); len(got) != len(steps) {
		t.Errorf("%d requests recorded, want %d: %+v", len(got), len(steps), got)
	}
}

// recorder keeps the Events a RolloutActions writes (a unit test's fake
// of the one step).
type recorder struct {
	mu     sync.Mutex // guards events
	events []string
}

func (r *recorder) Eventf(_ runtime.Object, _ runtime.Object, typ, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, typ+" "+reason+": "+fmt.Sprintf(note, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func TestARolloutRequestIsRecordedOnceAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	stop := e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	stop() // the operators below are the test's, called one reconcile at a time

	rec := &recorder{}
	// fresh is an operator started now: its watch lists the Deployment.
	fresh := func() *operator.RolloutActions {
		r := &operator.RolloutActions{Client: e.c, Store: e.store, Reader: e.store, Recorder: rec, Log: slog.New(slog.DiscardHandler)}
		r.WatchCreate(e.get("api"))
		return r
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: e.ns, Name: "api"}}
	reconcile := func(r *operator.RolloutActions) ctrl.Result {
		t.Helper()
		res, err := r.Reconcile(e.ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	e.annotate("api", request("pause", 1, 0, "alice", "r1"))
	reconcile(fresh())
	if got := e.requests("api"); len(got) != 1 || got[0].Request != "r1" {
		t.Fatalf("after the first reconcile: %+v, want the pause r1", got)
	}
	if got := rec.take(); len(got) != 1 || !strings.HasPrefix(got[0], "Normal "+operator.EventReasonRolloutActionRecorded+": rollout.paused by alice") {
		t.Errorf("Events %q, want one Normal naming the pause and alice", got)
	}
	t.Run("a restarted operator records the same request nothing more", func(t *testing.T) {
		reconcile(fresh())
		reconcile(fresh())
		if got := e.requests("api"); len(got) != 1 {
			t.Errorf("%d requests recorded, want 1: %+v", len(got), got)
		}
		if got := rec.take(); len(got) != 0 {
			t.Errorf("Events %q for a request already recorded", got)
		}
	})
	t.Run("a request id already recorded for another generation is not recorded again", func(t *testing.T) {
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
		e.annotate("api", request("resume", 1, 0, "alice", "r1"))
		reconcile(fresh())
		if got := e.requests("api"); len(got) != 1 {
			t.Errorf("%d requests recorded, want 1: %+v", len(got), got)
		}
		if got := rec.take(); len(got) != 0 {
			t.Errorf("Events %q for a request already recorded", got)
		}
	})
	t.Run("a request for a generation whose revision is not appended yet waits and appends nothing", func(t *testing.T) {
		e.annotate("api", request("pause", 2, 0, "alice", "r2"))
		if res := reconcile(fresh()); res.RequeueAfter <= 0 {
			t.Errorf("result %+v, want a requeue", res)
		}
		if got := e.requests("api"); len(got) != 1 {
			t.Errorf("%d requests recorded, want 1: %+v", len(got), got)
		}
	})
	t.Run("a malformed request appends nothing and warns", func(t *testing.T) {
		e.annotate("api", `{"action":"pause","generation":2,"by":"alice"}`)
		reconcile(fresh())
		got := rec.take()
		if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+operator.EventReasonRolloutActionInvalid) || !strings.Contains(got[0], `"request" is missing`) {
			t.Errorf("Events %q, want one Warning naming the missing request", got)
		}
		if got := e.requests("api"); len(got) != 1 {
			t.Errorf("%d requests recorded, want 1: %+v", len(got), got)
		}
	})
}

// racingStore appends a transition of its own on the subject of the first
// conditional append it is asked for, just before that append: another
// writer (the rollout runner) won the race.
type racingStore struct {
	operator.EventStore
	t     *testing.T
	raced bool
	other events.Event
}

func (s *racingStore) Append(ctx context.Context, ev events.Event, opts ...events.AppendOption) (events.Position, error) {
	if !s.raced {
		s.raced = true
		if _, err := s.EventStore.Append(ctx, s.other); err != nil {
			s.t.Fatal(err)
		}
	}
	return s.EventStore.Append(ctx, ev, opts...)
}

func TestARolloutRequestThatLosesAnAppendRaceIsDecidedAgain(t *testing.T) {
	e := newEnv(t)
	stop := e.startOperator()
	d := e.deployment("api", map[string]string{"role": "analyzer"})
	rev := e.revisionOf("api", 1)
	stop()

	other, err := events.New(events.Keys{Namespace: e.ns, Name: "api"}, events.NewRolloutTransition(events.TypeRolloutPaused,
		events.RolloutTransition{UID: string(d.UID), Generation: 1, RevisionID: rev.RevisionID, By: "bob", Request: "other"}),
		events.WithCorrelation(string(d.UID), 1))
	if err != nil {
		t.Fatal(err)
	}
	racing := &racingStore{EventStore: e.store, t: t, other: other}
	r := &operator.RolloutActions{Client: e.c, Store: racing, Reader: e.store, Log: slog.New(slog.DiscardHandler)}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: e.ns, Name: "api"}}
	e.annotate("api", request("resume", 1, 0, "alice", "mine"))
	if !r.WatchCreate(e.get("api")) {
		t.Fatal("the controller does not look at a Deployment listed with the annotation")
	}

	res, err := r.Reconcile(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("result %+v after a lost race, want a requeue", res)
	}
	if got := e.requests("api"); len(got) != 1 || got[0].Request != "other" {
		t.Fatalf("after the lost race: %+v, want only the other writer's request", got)
	}
	if _, err := r.Reconcile(e.ctx, req); err != nil {
		t.Fatal(err)
	}
	got := e.requests("api")
	if len(got) != 2 || got[1].Request != "mine" || got[1].By != "alice" {
		t.Errorf("after the retry: %+v, want the other request then mine", got)
	}
}

// requestIDs lists the request ids recorded on a Deployment's rollout
// subject, each with its transition and generation.
func (e *env) requestIDs(name string) []string {
	e.t.Helper()
	var out []string
	for _, tr := range e.requests(name) {
		out = append(out, fmt.Sprintf("%s %s by %s for generation %d", tr.EventType(), tr.Request, tr.By, tr.Generation))
	}
	return out
}

// hasWarning reports whether a Warning with this reason on the Deployment
// names s.
func (e *env) hasWarning(name, reason, s string) bool {
	for _, w := range e.warnings(name) {
		if strings.HasPrefix(w, reason+":") && strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// TestARequestWrittenAheadForTheNextGenerationIsRemovedWithItsWarning is
// the reproduction of issue #31 item 2 on a cluster without the admission
// policy (this package's API server has none): alice asks to pause
// generation 2 while the Deployment is at 1; the operator refuses it and
// removes it from the Deployment, so that after someone else changes the
// spec (generation 2) and the operator restarts there is nothing left to
// record; a new request for generation 2 is recorded. (A request still on
// the Deployment at the restart is
// TestARequestWrittenAheadWhileNoOperatorRunsIsRecordedOnceTheSpecCatchesUp.)
func TestARequestWrittenAheadForTheNextGenerationIsRemovedWithItsWarning(t *testing.T) {
	e := newEnv(t)
	stop := e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)

	e.annotate("api", request("pause", 2, 0, "alice", "ahead"))
	e.waitFor("the StaleRolloutAction Warning for the request ahead", func() bool {
		return e.hasWarning("api", operator.EventReasonRolloutActionStale, "request ahead (pause by alice) is for generation 2")
	})
	if v, ok := e.get("api").Annotations[fleetv1.AnnotationRolloutAction]; ok {
		t.Errorf("the refused request is still on the Deployment after its Warning: %s", v)
	}
	stop()
	e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	e.startOperator()
	e.revisionOf("api", 2)
	if got := e.requestIDs("api"); len(got) != 0 {
		t.Fatalf("recorded after the spec change and the restart: %q, want nothing", got)
	}

	e.annotate("api", request("pause", 2, 0, "bob", "now"))
	e.waitFor("the request for generation 2", func() bool { return len(e.requests("api")) > 0 })
	if diff := cmp.Diff([]string{"rollout.paused now by bob for generation 2"}, e.requestIDs("api")); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
}

// TestARequestFirstSeenAheadOfItsGenerationIsNotRecordedWhenTheSpecCatchesUp
// is the same request when the spec change reaches the controller before
// its reconcile does: the watch event of alice's write carries generation
// 1, and that is the generation the request is judged against.
func TestARequestFirstSeenAheadOfItsGenerationIsNotRecordedWhenTheSpecCatchesUp(t *testing.T) {
	e, r, rec := testRolloutActions(t)
	before := e.get("api")
	e.annotate("api", request("pause", 2, 0, "alice", "ahead"))
	if !r.WatchUpdate(before, e.get("api")) {
		t.Fatal("the controller does not look at a write that sets the annotation")
	}
	e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	if _, err := r.Reconcile(e.ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: e.ns, Name: "api"}}); err != nil {
		t.Fatal(err)
	}
	e.staleRequestRemoved(t, rec)

	e.startOperator()
	e.revisionOf("api", 2)
	e.annotate("api", request("resume", 2, 0, "bob", "now"))
	e.waitFor("the request for generation 2", func() bool { return len(e.requests("api")) > 0 })
	if diff := cmp.Diff([]string{"rollout.resumed now by bob for generation 2"}, e.requestIDs("api")); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
}

// TestAReconcileAheadOfTheWatchEventOfARequestWaitsForIt is the same
// request when a reconcile already queued for the Deployment reads it from
// the cache (which the informer updates before the predicates run) after
// the spec change and before the predicate has seen alice's write: the
// reconcile does not judge the request by the generation it reads but
// waits for the predicate, whose event carries generation 1.
func TestAReconcileAheadOfTheWatchEventOfARequestWaitsForIt(t *testing.T) {
	e, r, rec := testRolloutActions(t)
	before := e.get("api")
	e.annotate("api", request("pause", 2, 0, "alice", "ahead"))
	written := e.get("api")
	e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: e.ns, Name: "api"}}
	res, err := r.Reconcile(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.RequeueAfter <= 0 {
		t.Errorf("a reconcile of a request no watch event has carried yet returns %+v, want a requeue", res)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("Events %q before the watch event of the write, want none", got)
	}
	if !r.WatchUpdate(before, written) {
		t.Fatal("the controller does not look at a write that sets the annotation")
	}
	if _, err := r.Reconcile(e.ctx, req); err != nil {
		t.Fatal(err)
	}
	e.staleRequestRemoved(t, rec)
}

// TestARequestWrittenAheadWhileNoOperatorRunsIsRecordedOnceTheSpecCatchesUp
// is the limit ADR 0016's addendum names ("What remains"): without the
// admission policy, a request for generation 2 written while no operator
// runs and the Deployment is at 1, followed by a spec change before an
// operator starts, is still on the Deployment when the operator first sees
// it, at generation 2: it is recorded. The admission policy refuses that
// write.
func TestARequestWrittenAheadWhileNoOperatorRunsIsRecordedOnceTheSpecCatchesUp(t *testing.T) {
	e := newEnv(t)
	stop := e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	stop()

	e.annotate("api", request("pause", 2, 0, "alice", "ahead"))
	e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	e.startOperator()
	e.revisionOf("api", 2)
	e.waitFor("the request ahead recorded", func() bool { return len(e.requests("api")) > 0 })
	if diff := cmp.Diff([]string{"rollout.paused ahead by alice for generation 2"}, e.requestIDs("api")); diff != "" {
		t.Errorf("recorded (-want +got):\n%s", diff)
	}
	if w := e.warnings("api"); len(w) != 0 {
		t.Errorf("Warnings %q, want none: the operator never saw the request at generation 1", w)
	}
}

// testRolloutActions is a Deployment "api" at generation 1 with its
// revision, no operator running, and a RolloutActions controller the test
// feeds one event at a time, with the recorder of its Events.
func testRolloutActions(t *testing.T) (*env, *operator.RolloutActions, *recorder) {
	e := newEnv(t)
	stop := e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	stop()
	rec := &recorder{}
	r := &operator.RolloutActions{Client: e.c, Store: e.store, Reader: e.store, Recorder: rec, Log: slog.New(slog.DiscardHandler)}
	return e, r, rec
}

// staleRequestRemoved checks that the controller answered alice's request
// written ahead with one StaleRolloutAction Warning naming generation 1,
// and removed it from the Deployment.
func (e *env) staleRequestRemoved(t *testing.T, rec *recorder) {
	t.Helper()
	got := rec.take()
	if len(got) != 1 || !strings.HasPrefix(got[0], "Warning "+operator.EventReasonRolloutActionStale) ||
		!strings.Contains(got[0], "the Deployment was at generation 1 when it was written") {
		t.Errorf("Events %q, want one StaleRolloutAction Warning saying the Deployment was at generation 1", got)
	}
	if v, ok := e.get("api").Annotations[fleetv1.AnnotationRolloutAction]; ok {
		t.Errorf("the request is still on the Deployment: %s", v)
	}
}
