package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// manifest is a Deployment of image tag for kubectl apply.
func (e *env) manifest(name, tag string, selector map[string]string) string {
	var sel strings.Builder
	for k, v := range selector {
		fmt.Fprintf(&sel, "      %s: %q\n", k, v)
	}
	return fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: %s
  namespace: %s
spec:
  targetSelector:
    matchLabels:
%s  score:
    type: PodmanV0
    data:
      services:
      - name: api
        image: registry.example.com/api:%s
`, name, e.ns, sel.String(), tag)
}

// kubectl starts a bash script with the real kubectl on PATH, pointed at
// the test's API server; done receives its error and output once it ends.
func (e *env) kubectl(script string) (done <-chan kubectlResult) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 90*time.Second)
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	home := e.t.TempDir()
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.srv.KubeconfigPath(), "HOME="+home,
		"PATH="+filepath.Dir(e.srv.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	ch := make(chan kubectlResult, 1)
	if err := cmd.Start(); err != nil {
		cancel()
		e.t.Fatal(err)
	}
	go func() {
		defer cancel()
		err := cmd.Wait()
		ch <- kubectlResult{err: err, out: out.String()}
	}()
	e.t.Cleanup(func() { cancel() })
	return ch
}

type kubectlResult struct {
	err error
	out string
}

// statusWatch records every version of a Deployment the API server
// publishes, from its start until stop is called.
type statusWatch struct {
	mu   sync.Mutex
	seen []fleetv1.Deployment // guarded by mu
	stop func()
}

func (e *env) watchDeployment(name string) *statusWatch {
	e.t.Helper()
	wc, ok := e.c.(client.WithWatch)
	if !ok {
		e.t.Fatal("the test client cannot watch")
	}
	w, err := wc.Watch(e.ctx, &fleetv1.DeploymentList{}, client.InNamespace(e.ns))
	if err != nil {
		e.t.Fatal(err)
	}
	sw := &statusWatch{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			d, ok := ev.Object.(*fleetv1.Deployment)
			if !ok || d.Name != name || ev.Type == watch.Deleted {
				continue
			}
			sw.mu.Lock()
			sw.seen = append(sw.seen, *d.DeepCopy())
			sw.mu.Unlock()
		}
	}()
	sw.stop = func() {
		w.Stop()
		<-done
	}
	e.t.Cleanup(sw.stop)
	return sw
}

// mixed returns a description of every version that pairs a generation
// (observedGeneration, or the Ready condition's) with a phase, revision or
// Ready of another generation.
func (sw *statusWatch) mixed() []string {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var out []string
	for _, d := range sw.seen {
		s := d.Status
		ready := meta.FindStatusCondition(s.Conditions, fleetv1.ConditionReady)
		if s.ObservedGeneration == 0 && ready == nil {
			continue // no rollout status yet
		}
		switch {
		case s.Revision == nil || s.Revision.Generation != s.ObservedGeneration:
			out = append(out, fmt.Sprintf("resourceVersion %s: observedGeneration %d with revision %+v, phase %s", d.ResourceVersion, s.ObservedGeneration, s.Revision, s.Phase))
		case ready == nil || ready.ObservedGeneration != s.ObservedGeneration:
			out = append(out, fmt.Sprintf("resourceVersion %s: observedGeneration %d with Ready %+v", d.ResourceVersion, s.ObservedGeneration, ready))
		case (s.Phase == fleetv1.PhaseSucceeded) != (ready.Status == metav1.ConditionTrue):
			out = append(out, fmt.Sprintf("resourceVersion %s: phase %s with Ready %s", d.ResourceVersion, s.Phase, ready.Status))
		}
	}
	return out
}

// TestStatusBelongsToTheGenerationItNames applies generation 2 with
// kubectl while generation 1 is Succeeded and runs the documented wait
// right after it: the wait returns only once the test has made the device
// report generation 2, and no version of the status ever pairs a
// generation with the phase or Ready of another.
func TestStatusBelongsToTheGenerationItNames(t *testing.T) {
	e := newEnv(t)
	dev := "gen-" + e.ns
	e.device(dev, map[string]string{"role": "gen"})
	e.startOperator()
	sel := map[string]string{"role": "gen"}
	sw := e.watchDeployment("api")

	wait := "kubectl wait -n " + e.ns + " fdeploy/api --for=condition=Ready --timeout=80s"
	r := <-e.kubectl("kubectl apply -f - <<'EOF'\n" + e.manifest("api", "v1", sel) + "EOF\n")
	if r.err != nil {
		t.Fatalf("kubectl apply: %v\n%s", r.err, r.out)
	}
	rev1 := e.revisionOf("api", 1)
	e.report(dev, "api", rev1, events.WorkloadConverged, "")
	if r := <-e.kubectl(wait); r.err != nil || !strings.Contains(r.out, "condition met") {
		t.Fatalf("generation 1: %s: %v\n%s", wait, r.err, r.out)
	}
	if d := e.get("api"); d.Status.Phase != fleetv1.PhaseSucceeded || d.Status.ObservedGeneration != 1 {
		t.Fatalf("generation 1 waited for: phase %s, observedGeneration %d", d.Status.Phase, d.Status.ObservedGeneration)
	}

	// Generation 2, and the documented wait right after the apply.
	waited := e.kubectl("kubectl apply -f - <<'EOF'\n" + e.manifest("api", "v2", sel) + "EOF\n" + wait)
	rev2 := e.revisionOf("api", 2)
	e.waitFor("the status of generation 2 in progress", func() bool {
		s := e.get("api").Status
		return s.ObservedGeneration == 2 && s.Revision != nil && s.Revision.Generation == 2 && s.Phase == fleetv1.PhaseProgressing
	})
	select {
	case r := <-waited:
		t.Fatalf("%s returned before the device reported generation 2: %v\n%s", wait, r.err, r.out)
	default:
	}
	e.report(dev, "api", rev2, events.WorkloadConverged, "")
	r = <-waited
	if r.err != nil || !strings.Contains(r.out, "condition met") {
		t.Fatalf("generation 2: %s: %v\n%s", wait, r.err, r.out)
	}
	if d := e.get("api"); d.Status.Phase != fleetv1.PhaseSucceeded || d.Status.Revision == nil || d.Status.Revision.Generation != 2 {
		t.Errorf("after the wait: phase %s of revision %+v, want Succeeded of generation 2", d.Status.Phase, d.Status.Revision)
	}
	sw.stop()
	if bad := sw.mixed(); len(bad) > 0 {
		t.Errorf("%d status versions pair a generation with another one's rollout status:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}
