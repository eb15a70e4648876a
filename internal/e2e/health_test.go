package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

// healthTick is the operator's StatusInterval in these tests: the rollout
// runner's tick, on which it judges progress deadlines and writes status.
const healthTick = 200 * time.Millisecond

// healthEnv is the real API server, JetStream, the operator and agents on
// the simulated engine, each agent a device of one namespace.
type healthEnv struct {
	t       *testing.T
	ctx     context.Context
	srv     *kubeapi.Server
	nsrv    *natsembed.Server
	st      *events.Store
	metrics *operator.Metrics
	ns      string
	kubectl func(stdin string, args ...string) string
}

// healthRuns numbers the environments of this process, so that a test run
// again (-count) gets a namespace and devices of its own.
var healthRuns atomic.Int64

// newHealthEnv starts the operator on a fresh JetStream and creates
// namespace e2e-<name>-<pid>-<run>.
func newHealthEnv(t *testing.T, ctx context.Context, name string) *healthEnv {
	srv := kubeapi.Shared(t)
	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	e := &healthEnv{t: t, ctx: ctx, srv: srv, nsrv: nsrv, st: st, metrics: operator.NewMetrics(),
		ns: fmt.Sprintf("e2e-%s-%d-%d", name, os.Getpid(), healthRuns.Add(1)), kubectl: kubectlFor(t, ctx, srv)}
	runOperator(t, ctx, srv, st, kv, operator.Options{Logger: quietLogger(), StatusInterval: healthTick, SeveralPerProcess: true,
		Metrics: e.metrics})
	e.kubectl("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+e.ns+"}\n", "apply", "-f", "-")
	return e
}

// healthAgent is a device of the namespace and its agent on a simulated
// engine, with a state directory that outlives a restart of the agent.
type healthAgent struct {
	e        *healthEnv
	id       string
	rt       *sim.Runtime
	stateDir string
	metrics  *agent.Metrics
	stop     func()
}

// device creates Device <namespace>-<name> labelled app=<namespace> (and
// canary=true when canary) and runs an agent for it on rt until the test
// ends.
func (e *healthEnv) device(name string, canary bool, rt *sim.Runtime) *healthAgent {
	e.t.Helper()
	id := e.ns + "-" + name
	e.kubectl(fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: %s, labels: {app: %s, canary: %q}}\nspec: {identitySubject: \"sub-%s\"}\n",
		id, e.ns, fmt.Sprint(canary), id), "apply", "-n", e.ns, "-f", "-")
	a := &healthAgent{e: e, id: id, rt: rt, stateDir: e.t.TempDir()}
	a.start()
	e.t.Cleanup(func() { a.stop() })
	return a
}

// start runs a new agent process for the device (new connection, new
// metrics, the same engine and state directory).
func (a *healthAgent) start() {
	e := a.e
	nc, err := nats.Connect(e.nsrv.ClientURL(), nats.CustomInboxPrefix("_INBOX_"+a.id))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	log := quietLogger()
	a.metrics = agent.NewMetrics(nil)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: a.id, Conn: nc, Logger: log, StateDir: a.stateDir, Metrics: a.metrics,
			Reconciler: &agent.Reconciler{Runtime: a.rt, Log: log, StopTimeout: time.Second}})
	}()
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("agent %s: %v", a.id, err)
			}
			nc.Close()
		})
	}
}

// deaths is how many deaths of its containers the running agent counted.
func (a *healthAgent) deaths() int {
	a.e.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(a.metrics.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		a.e.t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if f.GetName() == agent.MetricContainerDeaths {
			for _, m := range f.GetMetric() {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// crash ends service's process with code (oom: killed by the OOM killer);
// its restart policy starts it again at once.
func (a *healthAgent) crash(service string, code int, oom bool) {
	a.e.t.Helper()
	if err := a.rt.Crash(service, code, oom); err != nil {
		a.e.t.Fatalf("crash %s on %s: %v", service, a.id, err)
	}
}

// reports are the device's records of report kind (workload, health).
func (a *healthAgent) reports(kind events.ReportKind) []events.Record {
	a.e.t.Helper()
	subject, err := events.ReportSubject(a.id, kind)
	if err != nil {
		a.e.t.Fatal(err)
	}
	var out []events.Record
	for rec, err := range a.e.st.Replay(a.e.ctx, subject, events.FromStart()) {
		if err != nil {
			a.e.t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// apply applies a Deployment of one service to the namespace's devices.
func (e *healthEnv) apply(name, rollout, service, image string) {
	e.t.Helper()
	e.kubectl(fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: %s}
spec:
  targetSelector: {matchLabels: {app: %s}}
  rollout: {%s}
  score: {type: PodmanV0, data: {services: [{name: %s, image: "%s", restart_policy: unless-stopped}]}}
`, name, e.ns, rollout, service, image), "apply", "-n", e.ns, "-f", "-")
}

// waitFor polls the Deployment with kubectl until check holds, for as
// long as the test may run; the failure shows its status (waitObject).
func (e *healthEnv) waitFor(name, what string, check func(kobj) error) {
	e.t.Helper()
	waitObject(e.t, e.ctx, e.srv, e.ns, "fdeploy/"+name, what, check)
}

// waitReady waits until the Deployment's current generation is Ready.
func (e *healthEnv) waitReady(name string) {
	e.t.Helper()
	e.waitFor(name, "become Ready", conditionIs("Ready", "True"))
}

// condition is the Deployment's condition typ as "status reason message"
// read with kubectl, for generation gen only ("" otherwise).
func (e *healthEnv) condition(name, typ string, gen int) string {
	out := e.kubectl("", "get", "fdeploy/"+name, "-n", e.ns, "-o",
		fmt.Sprintf(`jsonpath={range .status.conditions[?(@.type=="%s")]}{.observedGeneration} {.status} {.reason} {.message}{end}`, typ))
	g, rest, _ := strings.Cut(out, " ")
	if g != fmt.Sprint(gen) {
		return ""
	}
	return rest
}

// gauge is the value of the operator's metric name for the Deployment, and
// whether it is exported.
func (e *healthEnv) gauge(name, deployment string) (float64, bool) {
	e.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e.metrics.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == e.ns && l["deployment"] == deployment && m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// progressAt is the rollout's progress clock as ADR 0018 defines it, read
// from the streams: the latest stored time of the Deployment's revision
// events, its rollout transitions, and each device's first report of
// generation gen.
func (e *healthEnv) progressAt(name string, gen int64) time.Time {
	e.t.Helper()
	var at time.Time
	later := func(t time.Time) {
		if t.After(at) {
			at = t
		}
	}
	for _, filter := range []string{"fleet.intent.deployment." + e.ns + "." + name, "fleet.rollout.deployment." + e.ns + "." + name} {
		for rec, err := range e.st.Replay(e.ctx, filter, events.FromStart()) {
			if err != nil {
				e.t.Fatal(err)
			}
			if c := rec.Event.Correlation; c != nil && c.Generation == gen {
				later(rec.Stored)
			}
		}
	}
	first := map[string]bool{}
	for rec, err := range e.st.Replay(e.ctx, "fleet.report.*.workload", events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		ws, err := events.Decode[events.WorkloadStatus](rec.Event)
		if err != nil || ws.Namespace != e.ns || ws.Deployment != name || ws.Generation != gen || first[rec.Subject] {
			continue
		}
		first[rec.Subject] = true
		later(rec.Stored)
	}
	return at
}

// TestATypoedImageExceedsItsProgressDeadlineWithinOneTick: the issue's
// typo'd image (localhost/fleet-examples/analysis-apii:v1, whose registry
// refuses connections) on an agent of the simulated engine, with
// progressDeadline 30s. The device reports Pending "registry unavailable,
// retrying"; the Deployment's Progressing condition, read with kubectl,
// turns False with reason ProgressDeadlineExceeded no earlier than 30 s
// after the rollout's last progress and no later than one runner tick
// after that (plus the time to write and read the status), naming the
// device and its last report; Ready is False and the deadline gauge is 1.
// Nothing is decided: the phase stays.
func TestATypoedImageExceedsItsProgressDeadlineWithinOneTick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newHealthEnv(t, ctx, "typo")
	const image = "localhost/fleet-examples/analysis-apii:v1"
	dev := e.device("1", false, sim.New(sim.Options{Unreachable: []string{"localhost"}})).id
	e.apply("typo", "progressDeadline: 30s", "typo", image)
	var progressing string
	var seen time.Time
	testenv.EventuallyErr(t, "Progressing False, ProgressDeadlineExceeded", 90*time.Second, func() error {
		progressing, seen = e.condition("typo", "Progressing", 1), time.Now()
		if !strings.HasPrefix(progressing, "False ProgressDeadlineExceeded ") {
			return fmt.Errorf("Progressing of generation 1 is %q", progressing)
		}
		return nil
	})
	const deadline = 30 * time.Second
	// The status is written on the tick after the deadline passed; reading
	// it back with kubectl (a process, and the poll's back-off) adds the
	// rest of the bound.
	const slack = 3 * time.Second
	at := e.progressAt("typo", 1)
	if early := at.Add(deadline); seen.Before(early) {
		t.Errorf("ProgressDeadlineExceeded seen at %s, before the deadline passed (%s)", seen.Format(time.RFC3339Nano), early.Format(time.RFC3339Nano))
	}
	if late := at.Add(deadline + healthTick + slack); seen.After(late) {
		t.Errorf("ProgressDeadlineExceeded seen at %s, more than one tick (%s) and %s after the deadline passed at %s",
			seen.Format(time.RFC3339Nano), healthTick, slack, at.Add(deadline).Format(time.RFC3339Nano))
	}
	for _, want := range []string{"progress deadline (30s)", "1 waiting: " + dev + " Pending since ", "registry unavailable, retrying", image} {
		if !strings.Contains(progressing, want) {
			t.Errorf("the Progressing message lacks %q: %s", want, progressing)
		}
	}
	if ready := e.condition("typo", "Ready", 1); !strings.HasPrefix(ready, "False ") {
		t.Errorf("Ready of generation 1 is %q, want False", ready)
	}
	if v, ok := e.gauge(operator.MetricRolloutDeadline, "typo"); !ok || v != 1 {
		t.Errorf("%s = %v (exported: %v), want 1", operator.MetricRolloutDeadline, v, ok)
	}
	if phase := e.kubectl("", "get", "fdeploy/typo", "-n", e.ns, "-o", "jsonpath={.status.phase}"); phase == "Failed" || phase == "Succeeded" {
		t.Errorf("phase %s: the deadline decides nothing", phase)
	}
}
