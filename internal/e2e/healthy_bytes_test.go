package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

var update = flag.Bool("update", false, "rewrite the pinned records of testdata/ (healthy-deployment.jsonl)")

// healthyFixture holds the records a healthy Deployment writes.
const healthyFixture = "testdata/healthy-deployment.jsonl"

// uidPlaceholder stands for the Deployment's UID in the fixture: the API
// server gives every object a random UID, so it is the one value of the
// records that cannot be fixed, and the only one normalised.
const uidPlaceholder = "$DEPLOYMENT_UID"

// farFuture is a timeout no distance between a stamped event time and the
// real clock reaches: 200 years.
const farFuture = 200 * 365 * 24 * time.Hour

// TestAHealthyDeploymentWritesThePinnedRecords: a Deployment whose service
// stays up, rolled out to a canary and then released to the other device
// (generation 1, then an update to generation 2), with two agents on the
// simulated engine, writes exactly the records of
// testdata/healthy-deployment.jsonl: every FLEET_INTENT and FLEET_ROLLOUT
// record of the Deployment, every record the devices wrote on
// FLEET_REPORTS (subject, headers and data bytes), and the devices'
// fleet-intent values. Ids and times are fixed by an injected stamp and
// device clock; the Deployment's UID is the one value normalised. It is the
// proof that a healthy Deployment's events stay byte-identical (ADR 0019);
// -update rewrites the fixture.
func TestAHealthyDeploymentWritesThePinnedRecords(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	stamp := newStamper(at)
	logger := quietLogger()

	const ns, image1, image2 = "healthy-bytes", "registry.example.com/healthy:v1", "registry.example.com/healthy:v2"
	devices := []string{"hb-1", "hb-2"} // hb-1 is the canary
	kubectl := kubectlFor(t, ctx, srv)
	kubectl("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n", "apply", "-f", "-")
	// The API server is the package's: a later run in this process (-count)
	// starts from no Deployment and no Device again. The operator is
	// stopped by then, so the finalizers are taken off by hand.
	t.Cleanup(func() {
		for _, obj := range []string{"fdeploy/api", "fdev/" + devices[0], "fdev/" + devices[1]} {
			_, _ = srv.Kubectl(context.Background(), nil, "delete", obj, "-n", ns, "--wait=false", "--ignore-not-found")
			_, _ = srv.Kubectl(context.Background(), nil, "patch", obj, "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		}
	})
	for i, dev := range devices {
		kubectl(fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: %s, labels: {app: healthy-bytes, canary: %q}}\nspec: {identitySubject: \"sub-%s\"}\n",
			dev, fmt.Sprint(i == 0), dev), "apply", "-n", ns, "-f", "-")
	}

	opCtx, stopOperator := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() {
		// The operator times a target from its events' times, which the
		// stamp fixes at `at`, hours or years from the real clock: with
		// the default hour, a device a loaded machine let report one tick
		// after its release was removed as silent. The timeouts here are
		// longer than any distance between the two clocks.
		opDone <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: st, Reader: st, IntentKV: kv,
			Logger: logger, StatusInterval: 200 * time.Millisecond, SeveralPerProcess: true, EventStamp: stamp.option(),
			TargetTimeout: farFuture, ProgressDeadline: farFuture})
	}()
	agCtx, stopAgents := context.WithCancel(ctx)
	var agentConns []*nats.Conn
	agDone := make(chan error, len(devices))
	for _, dev := range devices {
		nc := natstest.Connect(t, nsrv, nats.CustomInboxPrefix("_INBOX_"+dev))
		agentConns = append(agentConns, nc)
		rec := &agent.Reconciler{Runtime: sim.New(sim.Options{LocalImages: []string{image1, image2}}), Log: logger, StopTimeout: time.Second}
		// The device clock stands still (the reports' since): the agent's
		// monitor sees no time pass, and services that stay up give it
		// nothing to decide anyway.
		go func() {
			agDone <- agent.Run(agCtx, agent.Options{Device: dev, Conn: nc, Reconciler: rec, Logger: logger,
				Now: func() time.Time { return at }, EventStamp: stamp.option()})
		}()
	}
	stop := func() {
		stopAgents()
		for range devices {
			<-agDone
		}
		stopOperator()
		if err := <-opDone; err != nil {
			t.Errorf("operator.Run: %v", err)
		}
	}
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	manifest := func(image string) string {
		return `apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: api}
spec:
  targetSelector: {matchLabels: {app: healthy-bytes}}
  score:
    type: PodmanV0
    data:
      services:
        - name: api
          image: ` + image + `
          env: [{name: GREETING, value: hello}]
          restart_policy: unless-stopped
`
	}
	pinned := func() ([]string, error) {
		js := st.JetStream()
		var lines []string
		for _, s := range []struct {
			stream string
			keep   func(string) bool
		}{
			{events.StreamIntent, func(subj string) bool { return subjectToken(subj, 3) == ns }},
			{events.StreamRollout, func(subj string) bool { return subjectToken(subj, 3) == ns }},
			{events.StreamReports, func(subj string) bool { d := subjectToken(subj, 2); return d == devices[0] || d == devices[1] }},
		} {
			l, err := dumpStream(ctx, js, s.stream, s.keep)
			if err != nil {
				return nil, err
			}
			lines = append(lines, l...)
		}
		l, err := dumpKV(ctx, kv, devices)
		return append(lines, l...), err
	}
	// settled: generation's rollout succeeded, both devices' last workload
	// report is its Converged, and both fleet-intent values hand it.
	settled := func(generation int) error {
		lines, err := pinned()
		if err != nil {
			return err
		}
		gen := fmt.Sprintf(`"generation":%d,`, generation)
		last := map[string]string{} // device → its last report's data
		succeeded := false
		for _, l := range lines {
			var r struct {
				Subject, KV string
				Data        json.RawMessage
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				return fmt.Errorf("%w: %s", err, l)
			}
			switch {
			case r.KV != "" && !strings.Contains(l, gen):
				return fmt.Errorf("a fleet-intent value does not hand generation %d: %s", generation, l)
			case strings.HasPrefix(r.Subject, "fleet.report."):
				last[subjectToken(r.Subject, 2)] = string(r.Data)
			case strings.Contains(string(r.Data), `"type":"rollout.succeeded"`) || strings.Contains(l, `"rollout.succeeded"`):
				succeeded = succeeded || strings.Contains(string(r.Data), gen)
			}
		}
		if !succeeded {
			return fmt.Errorf("no rollout.succeeded of generation %d", generation)
		}
		for _, d := range devices {
			if l := last[d]; !strings.Contains(l, `"phase":"Converged"`) || !strings.Contains(l, gen) {
				return fmt.Errorf("%s's last report is not generation %d Converged: %s", d, generation, l)
			}
		}
		return nil
	}

	for g, image := range []string{image1, image2} {
		kubectl(manifest(image), "apply", "-n", ns, "-f", "-")
		waitObject(t, ctx, srv, ns, "fdeploy/api", "become Ready", conditionIs("Ready", "True"))
		testenv.EventuallyErr(t, fmt.Sprintf("generation %d settled", g+1), 30*time.Second, func() error { return settled(g + 1) })
	}
	uid := strings.TrimSpace(kubectl("", "get", "fdeploy/api", "-n", ns, "-o", "jsonpath={.metadata.uid}"))
	if uid == "" {
		t.Fatal("the Deployment has no UID")
	}

	// Stop every writer, then make sure what the agents published is
	// stored: a report that waits until stored (Store.Report) goes through
	// the reports stream after everything they sent before their
	// connections' flush.
	stop()
	stopped = true
	for _, nc := range agentConns {
		if err := nc.FlushWithContext(ctx); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatal(err)
		}
	}
	fence, err := events.New(events.Keys{Device: "hb-fence"}, events.WorkloadStatus{Namespace: ns, Deployment: "fence", Phase: events.WorkloadPending})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Report(ctx, fence); err != nil {
		t.Fatal(err)
	}

	lines, err := pinned()
	if err != nil {
		t.Fatal(err)
	}
	// Services that stay up are never reported degraded or recovered (ADR
	// 0019): nothing on a device's health subject. (Every report subject
	// of the devices is pinned below anyway; this says why it matters.)
	for _, dev := range devices {
		health, err := events.ReportSubject(dev, events.ReportHealth)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			if strings.Contains(l, `"subject":"`+health+`"`) {
				t.Errorf("a healthy Deployment's device wrote on %s: %s", health, l)
			}
		}
	}
	got := strings.ReplaceAll(strings.Join(lines, "\n")+"\n", uid, uidPlaceholder)
	if *update {
		if err := os.MkdirAll(filepath.Dir(healthyFixture), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(healthyFixture, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %d records to %s", len(lines), healthyFixture)
		return
	}
	want, err := os.ReadFile(healthyFixture)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("a healthy Deployment's records differ from %s:\n%s", healthyFixture, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines only in want (-) and only in got (+), in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inW, inG := map[string]int{}, map[string]int{}
	for _, l := range w {
		inW[l]++
	}
	for _, l := range g {
		inG[l]++
	}
	var b strings.Builder
	for i, l := range w {
		if inG[l] == 0 {
			fmt.Fprintf(&b, "- %d: %s\n", i+1, l)
		}
	}
	for i, l := range g {
		if inW[l] == 0 {
			fmt.Fprintf(&b, "+ %d: %s\n", i+1, l)
		}
	}
	if b.Len() == 0 {
		return "the same lines in another order or number"
	}
	return b.String()
}
