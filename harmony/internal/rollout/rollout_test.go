package rollout_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nationtech/harmony-fleet/harmony/internal/rollout"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

func TestMain(m *testing.M) {
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../../../k8s/config/crd"}})
}

const digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

type cluster struct {
	t   *testing.T
	ctx context.Context
	dyn dynamic.Interface
	ns  string
}

// newCluster gives the test its own namespace on the shared API server.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dyn, err := dynamic.NewForConfig(srv.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("r-%d", time.Now().UnixNano())
	nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, ctx: ctx, dyn: dyn, ns: ns}
}

func (c *cluster) deployment(digest string) *fleetv1.Deployment {
	d := &fleetv1.Deployment{Spec: fleetv1.DeploymentSpec{
		TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"app": "web"}},
		Rollout:        fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate},
		Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{
			{Name: "web", Image: "reg.example/app/web@" + digest, RestartPolicy: "unless-stopped"},
		}}},
	}}
	d.Name, d.Namespace = "web", c.ns
	d.Annotations = map[string]string{"harmony.nationtech.io/tag": "t1"}
	return d
}

func (c *cluster) apply(d *fleetv1.Deployment) rollout.Applied {
	c.t.Helper()
	a, err := rollout.Apply(c.ctx, c.dyn, d)
	if err != nil {
		c.t.Fatal(err)
	}
	return a
}

// report writes the status the operator would write for a revision.
func (c *cluster) report(a rollout.Applied, gen int64, phase fleetv1.DeploymentPhase, counts fleetv1.RolloutCounts, failure *fleetv1.DeviceFailure) {
	c.t.Helper()
	st := fleetv1.DeploymentStatus{ObservedGeneration: gen, Revision: &fleetv1.RevisionRef{UID: a.UID, Generation: gen, ID: fmt.Sprintf("r%d", gen)},
		Phase: phase, Counts: counts, LatestFailure: failure}
	c.patchStatus(a.Name, st)
}

func (c *cluster) patchStatus(name string, st fleetv1.DeploymentStatus) {
	c.t.Helper()
	b, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.dyn.Resource(rollout.Resource).Namespace(c.ns).Patch(c.ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		c.t.Fatal(err)
	}
}

func TestAnIdenticalApplyKeepsTheGenerationAndANewDigestMakesTheNext(t *testing.T) {
	c := newCluster(t)
	first := c.apply(c.deployment(digestA))
	again := c.apply(c.deployment(digestA))
	if diff := cmp.Diff(first, again); diff != "" {
		t.Fatalf("re-applying the same Deployment changed the revision (-first +again):\n%s", diff)
	}
	retagged := c.deployment(digestA)
	retagged.Annotations["harmony.nationtech.io/tag"] = "t2"
	if got := c.apply(retagged); got.Generation != first.Generation {
		t.Errorf("a new tag with the same digests made generation %d, want %d", got.Generation, first.Generation)
	}
	next := c.apply(c.deployment(digestB))
	if next.UID != first.UID || next.Generation != first.Generation+1 {
		t.Errorf("a new digest gave %+v, want uid %s generation %d", next, first.UID, first.Generation+1)
	}
	u, err := c.dyn.Resource(rollout.Resource).Namespace(c.ns).Get(c.ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	managers := map[string]string{}
	for _, m := range u.GetManagedFields() {
		managers[m.Manager] = string(m.Operation)
	}
	if managers[rollout.FieldManager] != string(metav1.ManagedFieldsOperationApply) {
		t.Errorf("managed fields %v, want %q applying", managers, rollout.FieldManager)
	}
}

func TestWait(t *testing.T) {
	ok := fleetv1.RolloutCounts{Total: 2, Succeeded: 2, Canaries: 1, CanariesSucceeded: 1}
	failure := &fleetv1.DeviceFailure{Device: "edge-2", Error: "init container migrate exited with code 3", Time: metav1.NewTime(time.Unix(1700000000, 0))}
	tests := []struct {
		name string
		// setup applies and reports; it returns the revision to wait for.
		setup func(c *cluster) rollout.Applied
		// during runs after Wait started (nil: nothing).
		during  func(c *cluster, a rollout.Applied)
		timeout time.Duration
		want    func(t *testing.T, st fleetv1.DeploymentStatus, err error)
	}{
		{
			name: "the success of the applied revision completes the wait",
			setup: func(c *cluster) rollout.Applied {
				a := c.apply(c.deployment(digestA))
				c.report(a, a.Generation, fleetv1.PhaseSucceeded, ok, nil)
				return a
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, st fleetv1.DeploymentStatus, err error) {
				if err != nil || st.Counts != ok {
					t.Fatalf("got %+v, %v; want the succeeded counts and no error", st.Counts, err)
				}
			},
		},
		{
			name: "the success of an older generation never completes a newer wait",
			setup: func(c *cluster) rollout.Applied {
				old := c.apply(c.deployment(digestA))
				c.report(old, old.Generation, fleetv1.PhaseSucceeded, ok, nil)
				return c.apply(c.deployment(digestB))
			},
			timeout: 3 * time.Second,
			want: func(t *testing.T, st fleetv1.DeploymentStatus, err error) {
				var te *rollout.TimeoutError
				if !errors.As(err, &te) || st.Revision != nil {
					t.Fatalf("got %+v, %v; want a timeout that saw no status of the new revision", st, err)
				}
			},
		},
		{
			name: "a newer revision reported while waiting completes it only when it is the applied one",
			setup: func(c *cluster) rollout.Applied {
				old := c.apply(c.deployment(digestA))
				c.report(old, old.Generation, fleetv1.PhaseSucceeded, ok, nil)
				return c.apply(c.deployment(digestB))
			},
			during: func(c *cluster, a rollout.Applied) {
				c.report(a, a.Generation, fleetv1.PhaseCanary, fleetv1.RolloutCounts{Total: 2, Pending: 2, Canaries: 1}, nil)
				c.report(a, a.Generation, fleetv1.PhaseSucceeded, ok, nil)
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, st fleetv1.DeploymentStatus, err error) {
				if err != nil || st.Revision == nil || st.Revision.Generation != 2 {
					t.Fatalf("got %+v, %v; want success of generation 2", st, err)
				}
			},
		},
		{
			name: "a failed revision fails the wait with the counts and the latest device error",
			setup: func(c *cluster) rollout.Applied {
				a := c.apply(c.deployment(digestA))
				c.report(a, a.Generation, fleetv1.PhaseFailed, fleetv1.RolloutCounts{Total: 2, Failed: 1, Pending: 1, Canaries: 1, CanariesFailed: 1}, failure)
				return a
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, _ fleetv1.DeploymentStatus, err error) {
				var fe *rollout.FailedError
				if !errors.As(err, &fe) {
					t.Fatalf("got %v, want a FailedError", err)
				}
				for _, s := range []string{"1 failed", "of 2", "edge-2", "exited with code 3", "canaries 0/1"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			},
		},
		{
			name: "a revision past its progress deadline ends the wait with the waiting devices",
			setup: func(c *cluster) rollout.Applied {
				a := c.apply(c.deployment(digestA))
				c.patchStatus(a.Name, stalled(a, a.Generation))
				return a
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, st fleetv1.DeploymentStatus, err error) {
				var se *rollout.StalledError
				if !errors.As(err, &se) || !errors.Is(err, rollout.ErrProgressDeadlineExceeded) || st.Revision == nil {
					t.Fatalf("got %+v, %v; want a StalledError (ErrProgressDeadlineExceeded) with the revision's status", st, err)
				}
				for _, s := range []string{"generation 1", "made no progress within its progress deadline", "1 pending, 0 failed of 2",
					"edge-2 Pending since", "registry unavailable, retrying"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not say %q", err, s)
					}
				}
			},
		},
		{
			name: "an older generation past its deadline never ends a newer wait",
			setup: func(c *cluster) rollout.Applied {
				old := c.apply(c.deployment(digestA))
				c.patchStatus(old.Name, stalled(old, old.Generation))
				return c.apply(c.deployment(digestB))
			},
			timeout: 3 * time.Second,
			want: func(t *testing.T, st fleetv1.DeploymentStatus, err error) {
				var te *rollout.TimeoutError
				if !errors.As(err, &te) || st.Revision != nil {
					t.Fatalf("got %+v, %v; want a timeout that saw no status of the new revision", st, err)
				}
			},
		},
		{
			name: "a newer apply supersedes the wait",
			setup: func(c *cluster) rollout.Applied {
				a := c.apply(c.deployment(digestA))
				c.apply(c.deployment(digestB))
				return a
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, _ fleetv1.DeploymentStatus, err error) {
				if !errors.Is(err, rollout.ErrSuperseded) {
					t.Fatalf("got %v, want ErrSuperseded", err)
				}
			},
		},
		{
			name: "a Deployment deleted and recreated supersedes the wait",
			setup: func(c *cluster) rollout.Applied {
				a := c.apply(c.deployment(digestA))
				if err := c.dyn.Resource(rollout.Resource).Namespace(c.ns).Delete(c.ctx, "web", metav1.DeleteOptions{}); err != nil {
					c.t.Fatal(err)
				}
				c.apply(c.deployment(digestA))
				return a
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, _ fleetv1.DeploymentStatus, err error) {
				if !errors.Is(err, rollout.ErrSuperseded) {
					t.Fatalf("got %v, want ErrSuperseded", err)
				}
			},
		},
		{
			name: "a revision without targets fails the wait with the operator's reason",
			setup: func(c *cluster) rollout.Applied {
				a := c.apply(c.deployment(digestA))
				c.patchStatus(a.Name, fleetv1.DeploymentStatus{ObservedGeneration: a.Generation, Conditions: []metav1.Condition{{
					Type: fleetv1.ConditionTargetsResolved, Status: metav1.ConditionFalse, ObservedGeneration: a.Generation,
					Reason: fleetv1.ReasonNoGroupSource, Message: "allowedGroups is set but no group source", LastTransitionTime: metav1.Now(),
				}}})
				return a
			},
			timeout: 30 * time.Second,
			want: func(t *testing.T, _ fleetv1.DeploymentStatus, err error) {
				if !errors.Is(err, rollout.ErrNoTargets) || !strings.Contains(err.Error(), fleetv1.ReasonNoGroupSource) {
					t.Fatalf("got %v, want ErrNoTargets naming NoGroupSource", err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			a := tc.setup(c)
			ctx, cancel := context.WithTimeout(c.ctx, tc.timeout)
			defer cancel()
			seen := make(chan fleetv1.DeploymentStatus, 16)
			type result struct {
				st  fleetv1.DeploymentStatus
				err error
			}
			done := make(chan result, 1)
			go func() {
				st, err := rollout.Wait(ctx, c.dyn, a, rollout.WaitOptions{Interval: 50 * time.Millisecond, Progress: func(st fleetv1.DeploymentStatus) {
					select {
					case seen <- st:
					default:
					}
				}})
				done <- result{st, err}
			}()
			if tc.during != nil {
				tc.during(c, a)
			}
			r := <-done
			tc.want(t, r.st, r.err)
			close(seen)
			for st := range seen {
				if st.Revision.UID != a.UID || st.Revision.Generation != a.Generation {
					t.Errorf("progress reported revision %+v, want only %s/%d", st.Revision, a.UID, a.Generation)
				}
			}
		})
	}
}

// stalled is the status of revision gen of a past its progress deadline:
// one target converged, edge-2 Pending, Progressing False
// ProgressDeadlineExceeded, as the operator writes it.
func stalled(a rollout.Applied, gen int64) fleetv1.DeploymentStatus {
	return fleetv1.DeploymentStatus{ObservedGeneration: gen, Revision: &fleetv1.RevisionRef{UID: a.UID, Generation: gen, ID: fmt.Sprintf("r%d", gen)},
		Phase: fleetv1.PhaseProgressing, Counts: fleetv1.RolloutCounts{Total: 2, Succeeded: 1, Pending: 1},
		Conditions: []metav1.Condition{{Type: fleetv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: gen,
			Reason: fleetv1.ReasonRolloutInProgress, Message: "1 of 2 targets converged; progress deadline exceeded", LastTransitionTime: metav1.Now()},
			{Type: fleetv1.ConditionProgressing, Status: metav1.ConditionFalse, ObservedGeneration: gen, Reason: fleetv1.ReasonProgressDeadlineExceeded,
				LastTransitionTime: metav1.Now(), Message: "revision r1: no progress within the progress deadline (10m0s) since 2026-12-05T00:00:00Z: " +
					"no transition, and no target's first report or first result (Converged or Failed); 1 waiting: edge-2 Pending since " +
					"2026-12-05T00:00:01Z: registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1"}}}
}

// flaky is a client whose Gets of Deployments go through get: n counts the
// Gets from 1, real is the API server's answer.
type flaky struct {
	dynamic.Interface
	get   func(n int, real func() (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error)
	mu    sync.Mutex
	calls int // guarded by mu
}

func (f *flaky) Resource(r schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return flakyResource{f.Interface.Resource(r), f}
}

func (f *flaky) gets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

type flakyResource struct {
	dynamic.NamespaceableResourceInterface
	f *flaky
}

func (r flakyResource) Namespace(ns string) dynamic.ResourceInterface {
	return flakyNamespaced{r.NamespaceableResourceInterface.Namespace(ns), r.f}
}

type flakyNamespaced struct {
	dynamic.ResourceInterface
	f *flaky
}

func (r flakyNamespaced) Get(ctx context.Context, name string, o metav1.GetOptions, sub ...string) (*unstructured.Unstructured, error) {
	r.f.mu.Lock()
	r.f.calls++
	n := r.f.calls
	r.f.mu.Unlock()
	return r.f.get(n, func() (*unstructured.Unstructured, error) { return r.ResourceInterface.Get(ctx, name, o, sub...) })
}

// failFirst fails the first n Gets with err.
func failFirst(n int, err error) func(int, func() (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error) {
	return func(i int, real func() (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error) {
		if i <= n {
			return nil, err
		}
		return real()
	}
}

func TestWaitRetriesAStatusReadThatFailsTransiently(t *testing.T) {
	gr := schema.GroupResource{Group: fleetv1.GroupVersion.Group, Resource: "deployments"}
	reset := &url.Error{Op: "Get", URL: "https://api.example/apis", Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
	tests := []struct {
		name string
		err  error
	}{
		{"429 too many requests", apierrors.NewTooManyRequests("slow down", 0)},
		{"503 service unavailable", apierrors.NewServiceUnavailable("restarting")},
		{"504 server timeout", apierrors.NewServerTimeout(gr, "get", 0)},
		{"a request timeout", apierrors.NewTimeoutError("request timed out", 0)},
		{"500 internal error", apierrors.NewInternalError(errors.New("etcd leader changed"))},
		{"a connection reset", reset},
		{"an unexpected EOF", &url.Error{Op: "Get", URL: "https://api.example/apis", Err: io.ErrUnexpectedEOF}},
		{"an EOF", io.EOF},
	}
	ok := fleetv1.RolloutCounts{Total: 1, Succeeded: 1}
	c := newCluster(t)
	a := c.apply(c.deployment(digestA))
	c.report(a, a.Generation, fleetv1.PhaseSucceeded, ok, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := &flaky{Interface: c.dyn, get: failFirst(3, tc.err)}
			var progress []fleetv1.DeploymentStatus
			ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
			defer cancel()
			st, err := rollout.Wait(ctx, cl, a, rollout.WaitOptions{Interval: 10 * time.Millisecond,
				Progress: func(st fleetv1.DeploymentStatus) { progress = append(progress, st) }})
			if err != nil || st.Counts != ok {
				t.Fatalf("got %+v, %v; want success after the failed reads", st.Counts, err)
			}
			if n := cl.gets(); n != 4 {
				t.Errorf("%d reads, want 3 failed and 1 good", n)
			}
			if len(progress) != 1 || progress[0].Phase != fleetv1.PhaseSucceeded {
				t.Errorf("progress %+v, want only the succeeded status", progress)
			}
		})
	}

	t.Run("reads failing until the deadline end with a timeout naming the last failure", func(t *testing.T) {
		cl := &flaky{Interface: c.dyn, get: failFirst(1<<30, apierrors.NewServiceUnavailable("etcd is down"))}
		ctx, cancel := context.WithTimeout(c.ctx, 300*time.Millisecond)
		defer cancel()
		_, err := rollout.Wait(ctx, cl, a, rollout.WaitOptions{Interval: 10 * time.Millisecond})
		var te *rollout.TimeoutError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), "the last status read failed") || !strings.Contains(err.Error(), "etcd is down") {
			t.Fatalf("got %v, want a timeout naming the last failed read", err)
		}
		if n := cl.gets(); n < 2 {
			t.Errorf("%d reads, want retries until the deadline", n)
		}
	})
}

func TestWaitEndsAtOnceOnAReadThatCannotSucceed(t *testing.T) {
	c := newCluster(t)
	a := c.apply(c.deployment(digestA))
	tests := []struct {
		name string
		get  func(int, func() (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error)
		want func(error) bool
	}{
		{"a forbidden read", failFirst(1<<30, apierrors.NewForbidden(schema.GroupResource{Resource: "deployments"}, "web", errors.New("no get"))),
			func(err error) bool { return apierrors.IsForbidden(err) }},
		{"a deleted Deployment", failFirst(1<<30, apierrors.NewNotFound(schema.GroupResource{Resource: "deployments"}, "web")),
			func(err error) bool { return errors.Is(err, rollout.ErrSuperseded) }},
		{"a Deployment that cannot be decoded", func(int, func() (*unstructured.Unstructured, error)) (*unstructured.Unstructured, error) {
			return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "web", "uid": a.UID}, "status": "garbled"}}, nil
		}, func(err error) bool { return err != nil && strings.Contains(err.Error(), "decode") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := &flaky{Interface: c.dyn, get: tc.get}
			ctx, cancel := context.WithTimeout(c.ctx, 30*time.Second)
			defer cancel()
			_, err := rollout.Wait(ctx, cl, a, rollout.WaitOptions{Interval: 10 * time.Millisecond})
			var te *rollout.TimeoutError
			if errors.As(err, &te) || !tc.want(err) {
				t.Fatalf("got %v", err)
			}
			if n := cl.gets(); n != 1 {
				t.Errorf("%d reads, want 1", n)
			}
		})
	}
}

func TestAHeldPullSecretPolicyIsReportedWithItsReason(t *testing.T) {
	c := newCluster(t)
	d := c.deployment(digestA)
	d.Spec.Score.Data.Services[0].ImagePullSecret = "web-pull"
	old := c.apply(d)
	a := c.apply(c.deployment(digestB))
	cond := func(gen int64, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: fleetv1.ConditionPullSecretPolicy, Status: metav1.ConditionFalse, ObservedGeneration: gen,
			Reason: reason, Message: msg, LastTransitionTime: metav1.Now()}
	}
	wait := func() ([]metav1.Condition, error) {
		var seen []metav1.Condition
		ctx, cancel := context.WithTimeout(c.ctx, 500*time.Millisecond)
		defer cancel()
		_, err := rollout.Wait(ctx, c.dyn, a, rollout.WaitOptions{Interval: 10 * time.Millisecond,
			PullSecretPolicy: func(c metav1.Condition) { seen = append(seen, c) }})
		return seen, err
	}

	t.Run("a condition of an older generation is not reported", func(t *testing.T) {
		c.patchStatus(a.Name, fleetv1.DeploymentStatus{ObservedGeneration: old.Generation,
			Conditions: []metav1.Condition{cond(old.Generation, fleetv1.ReasonOpenBaoDisabled, "no admin token")}})
		seen, err := wait()
		var te *rollout.TimeoutError
		if !errors.As(err, &te) || te.PullSecretPolicy != nil || strings.Contains(err.Error(), "OpenBao") || len(seen) != 0 {
			t.Fatalf("got %v, reported %+v; want a plain timeout", err, seen)
		}
	})
	for _, tc := range []struct{ reason, msg string }{
		{fleetv1.ReasonPolicySyncFailed, "write policy fleet-deployment-web: permission denied"},
		{fleetv1.ReasonOpenBaoDisabled, "the operator has no OpenBao admin token"},
		{fleetv1.ReasonOpenBaoRoleMissing, "role fleet-group-stores does not exist"},
	} {
		t.Run(tc.reason+" of the applied generation is shown live and in the timeout", func(t *testing.T) {
			c.patchStatus(a.Name, fleetv1.DeploymentStatus{ObservedGeneration: a.Generation,
				Conditions: []metav1.Condition{cond(a.Generation, tc.reason, tc.msg)}})
			seen, err := wait()
			if len(seen) != 1 || seen[0].Reason != tc.reason || seen[0].Message != tc.msg {
				t.Errorf("reported %+v, want the %s condition once", seen, tc.reason)
			}
			var te *rollout.TimeoutError
			if !errors.As(err, &te) {
				t.Fatalf("got %v, want a timeout", err)
			}
			for _, s := range []string{"pull-secret policy", tc.reason, tc.msg} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if line := rollout.PolicySummary(seen[0]); !strings.Contains(line, tc.reason) || !strings.Contains(line, tc.msg) {
				t.Errorf("PolicySummary %q", line)
			}
		})
	}
}

func TestCanaryStage(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts fleetv1.RolloutCounts
		want   string
	}{
		{"a revision without canaries has no canary stage", fleetv1.RolloutCounts{Total: 3, Succeeded: 3}, ""},
		{"a passed canary stage is described from the kept counts", fleetv1.RolloutCounts{Total: 2, Succeeded: 2, Canaries: 1, CanariesSucceeded: 1},
			" (canary stage: 1 of 1 canaries converged before the release)"},
		{"every canary of a larger stage is counted", fleetv1.RolloutCounts{Total: 10, Succeeded: 10, Canaries: 3, CanariesSucceeded: 3},
			" (canary stage: 3 of 3 canaries converged before the release)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rollout.CanaryStage(fleetv1.DeploymentStatus{Counts: tc.counts}); got != tc.want {
				t.Errorf("CanaryStage = %q, want %q", got, tc.want)
			}
		})
	}
}
