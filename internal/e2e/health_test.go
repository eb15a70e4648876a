package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
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
	nsrv    natsServer
	st      *events.Store
	metrics *operator.Metrics
	ns      string
	kubectl func(stdin string, args ...string) string
}

// natsServer is what the tests need of the embedded NATS server.
type natsServer interface{ ClientURL() string }

// newHealthEnv starts the operator on a fresh JetStream and creates
// namespace e2e-<name>-<pid>.
func newHealthEnv(t *testing.T, ctx context.Context, name string) *healthEnv {
	srv := kubeapi.Shared(t)
	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	e := &healthEnv{t: t, ctx: ctx, srv: srv, nsrv: nsrv, st: st, metrics: operator.NewMetrics(),
		ns: fmt.Sprintf("e2e-%s-%d", name, os.Getpid()), kubectl: kubectlFor(t, ctx, srv)}
	runOperator(t, ctx, srv, st, kv, operator.Options{Logger: quietLogger(), StatusInterval: healthTick, SeveralPerProcess: true,
		Metrics: e.metrics})
	e.kubectl("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+e.ns+"}\n", "apply", "-f", "-")
	return e
}

// device creates Device id labelled app=<namespace> and runs an agent for
// it on rt until the test ends.
func (e *healthEnv) device(id string, rt *sim.Runtime) {
	e.t.Helper()
	e.kubectl(fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: %s, labels: {app: %s}}\nspec: {identitySubject: \"sub-%s\"}\n",
		id, e.ns, id), "apply", "-n", e.ns, "-f", "-")
	nc, err := nats.Connect(e.nsrv.ClientURL(), nats.CustomInboxPrefix("_INBOX_"+id))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	log := quietLogger()
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: id, Conn: nc, Logger: log,
			Reconciler: &agent.Reconciler{Runtime: rt, Log: log, StopTimeout: time.Second}})
	}()
	e.t.Cleanup(func() {
		stop()
		<-done
		nc.Close()
	})
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
	dev := fmt.Sprintf("typo%d-1", os.Getpid())
	e.device(dev, sim.New(sim.Options{Unreachable: []string{"localhost"}}))

	e.kubectl(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: typo}
spec:
  targetSelector: {matchLabels: {app: `+e.ns+`}}
  rollout: {progressDeadline: 30s}
  score: {type: PodmanV0, data: {services: [{name: typo, image: "`+image+`", restart_policy: unless-stopped}]}}
`, "apply", "-n", e.ns, "-f", "-")
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
