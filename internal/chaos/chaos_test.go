package chaos_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/chaos"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 60*time.Second, "how long TestChaos injects faults (task chaos: 5m)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "TestChaos's fault schedule seed (0: from the clock; the run prints it)")
)

// Log records the run waits for: a fleet-operator process leads; a
// fleet-authcallout process subscribed.
const (
	logLeading        = "leading: the controllers and runners start"
	logCalloutServing = "auth callout serving"
)

// opProc is a running fleet-operator process.
type opProc struct {
	cmd  *exec.Cmd
	logs *testenv.SyncBuffer
	done chan struct{}
}

func (p *opProc) said(s string) bool { return strings.Contains(p.logs.String(), s) }

func (p *opProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// buildBinaries builds cmd/fleet-operator and cmd/fleet-authcallout into
// the test's folder and returns that folder.
func buildBinaries(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-o", dir+"/",
		"./cmd/fleet-operator", "./cmd/fleet-authcallout")
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build fleet-operator fleet-authcallout: %v\n%s", err, out)
	}
	return dir
}

// startProc runs bin with args and env added to this process's; it is
// killed when the test ends, and its last log lines shown if it failed.
func startProc(t *testing.T, name, bin string, args, env []string) *opProc {
	t.Helper()
	p := &opProc{logs: &testenv.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("%s logs (last lines):\n%s", name, tail(p.logs.String(), 30))
		}
	})
	return p
}

// startOperator runs a fleet-operator replica with leader election; its
// NATS URL (with the admin user's password) is in its environment only.
func (w *world) startOperator(bins string) *opProc {
	w.t.Helper()
	return startProc(w.t, "operator", filepath.Join(bins, "fleet-operator"), []string{"--kubeconfig", w.kube.KubeconfigPath(),
		"--log-format", "text", "--replicas", "3", "--status-interval", "200ms", "--leader-election-namespace", w.ns,
		"--leader-election-lease-duration", "6s", "--leader-election-renew-deadline", "4s", "--leader-election-retry-period", "1s"},
		[]string{"NATS_URL=" + w.adminURL()})
}

// outcome is what one fault did, for the figures.
type outcome struct {
	f                chaos.Fault
	killed, restored time.Time
	// leaderBefore: the operator replica killed was leading; takeover is
	// when another replica was seen leading (zero: not seen).
	leaderBefore bool
	takeover     time.Time
	// ledOn are the streams (ledger, FLEET_ROLLOUT) the killed server led.
	ledOn []string
	// serving is when a restarted callout process was seen subscribed.
	serving time.Time
}

// TestChaos is the bounded chaos run (`task chaos` runs it for 5 minutes;
// CI for -chaos.duration, 60 s by default): three nats-server processes,
// two fleet-operator processes with leader election, 12 devices in four
// agent processes, the plane's callout and a ledger; for the duration, a
// seeded schedule SIGKILLs one process at a time (a NATS server, an
// operator replica or an agent process) and restarts it, while the
// Deployment changes every few seconds. At the end the fleet must converge
// to the last generation, every transition must be appended once, the
// projections rebuilt from zero must equal the live state and no
// acknowledged ledger append may be lost or duplicated. It prints the
// schedule and the figures.
func TestChaos(t *testing.T) {
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration+15*time.Minute)
	defer cancel()
	bins := buildBinaries(t)
	w := startWorld(t, ctx, worldOptions{servers: 3, devices: 12, perProcess: 3, calloutProcs: 2, bins: bins})
	ops := []*opProc{w.startOperator(bins), w.startOperator(bins)}
	leader := func() int {
		for i, p := range ops {
			if p.said(logLeading) {
				return i
			}
		}
		return -1
	}
	w.waitFor("an operator replica to lead", 2*time.Minute, func() bool { return leader() >= 0 })
	w.startLedger()

	faults, err := chaos.NewSchedule(chaos.ScheduleOptions{Seed: seed, Duration: *chaosDuration,
		Targets: map[chaos.Kind]int{chaos.KindNATS: 3, chaos.KindOperator: len(ops), chaos.KindCallout: len(w.callouts),
			chaos.KindAgent: len(w.agents)},
		MinGap: 2 * time.Second, MaxGap: 6 * time.Second, MinDown: time.Second, MaxDown: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(chaos.FormatSchedule(seed, faults))
	t.Logf("to run this schedule again: go test -run '^TestChaos$' ./internal/chaos -args -chaos.duration=%s -chaos.seed=%d", *chaosDuration, seed)

	const changeEvery = 5 * time.Second
	gen := int64(1)
	w.deploy(gen)
	start := time.Now()
	nextChange := start.Add(changeEvery)
	var outs []*outcome
	var cur *outcome // the fault whose process is down
	next := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for next < len(faults) || cur != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("the run did not end: %v", ctx.Err())
		case <-tick.C:
		}
		now := time.Now()
		if now.After(nextChange) && now.Sub(start) < *chaosDuration && gen < maxGenerations {
			gen++
			w.deploy(gen)
			nextChange = now.Add(changeEvery)
		}
		for _, o := range outs { // a callout back, seen within a tick
			if o.f.Kind == chaos.KindCallout && !o.restored.IsZero() && o.serving.IsZero() && w.callouts[o.f.Target].said(logCalloutServing) {
				o.serving = now
			}
		}
		for _, o := range outs { // an operator takeover, seen within a tick
			if o.leaderBefore && o.takeover.IsZero() {
				for i, p := range ops {
					if i != o.f.Target && p.said(logLeading) {
						o.takeover = now
					}
				}
			}
		}
		if cur != nil && now.Sub(cur.killed) >= cur.f.Down {
			w.restore(cur, ops, bins)
			cur = nil
		}
		if cur == nil && next < len(faults) && now.Sub(start) >= faults[next].At {
			cur = &outcome{f: faults[next]}
			next++
			w.inject(cur, ops, leader)
			outs = append(outs, cur)
		}
	}
	ended := time.Now()
	t.Logf("faults over after %s; %d generations rolled; waiting for generation %d to converge", ended.Sub(start).Round(time.Second), gen, gen)
	converged := w.waitSucceeded(gen, 5*time.Minute)
	w.endLedger()

	var ledger chaos.LedgerFigures
	t.Run("every acknowledged append is in the ledger once", func(t *testing.T) {
		ledger, err = w.ledger.Check(ctx)
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("every rollout transition is appended once", func(t *testing.T) { w.transitionsOnce(t, []int64{gen}) })
	t.Run("the projections rebuilt from zero equal the live state", func(t *testing.T) { w.rebuildEqualsLive(t) })

	var b strings.Builder
	fmt.Fprintf(&b, "chaos run (seed %d, %s of faults, %d generations):\n", seed, *chaosDuration, gen)
	for _, o := range outs {
		fmt.Fprintf(&b, "  %s: %s\n", o.f, w.recovery(o))
	}
	fmt.Fprintf(&b, "  converged to generation %d on %d devices %s after the last fault\n", gen, len(w.devices), converged.Sub(ended).Round(10*time.Millisecond))
	fmt.Fprintf(&b, "  ledger: %s\n", ledger)
	t.Log(b.String())
}

// inject kills o's process.
func (w *world) inject(o *outcome, ops []*opProc, leader func() int) {
	w.t.Helper()
	o.killed = time.Now()
	switch o.f.Kind {
	case chaos.KindNATS:
		for _, st := range []string{ledgerStream, events.StreamRollout} {
			if info, err := w.streamInfo(st); err == nil && info.Cluster != nil && info.Cluster.Leader == w.cluster.Name(o.f.Target) {
				o.ledOn = append(o.ledOn, st)
			}
		}
		o.killed = time.Now()
		if err := w.cluster.Kill(o.f.Target); err != nil {
			w.t.Fatal(err)
		}
	case chaos.KindOperator:
		o.leaderBefore = leader() == o.f.Target
		ops[o.f.Target].kill()
	case chaos.KindCallout:
		w.callouts[o.f.Target].kill()
	case chaos.KindAgent:
		w.agents[o.f.Target].kill()
	default:
		w.t.Fatalf("no fault of kind %s", o.f.Kind)
	}
}

// restore starts o's process again.
func (w *world) restore(o *outcome, ops []*opProc, bins string) {
	w.t.Helper()
	o.restored = time.Now()
	switch o.f.Kind {
	case chaos.KindNATS:
		if err := w.cluster.Restart(w.ctx, o.f.Target); err != nil {
			w.t.Fatal(err)
		}
	case chaos.KindOperator:
		ops[o.f.Target] = w.startOperator(bins)
	case chaos.KindCallout:
		w.callouts[o.f.Target] = w.startCallout()
	case chaos.KindAgent:
		w.agents[o.f.Target] = startAgents(w.t, w.cluster.URL(), w.keys, w.agents[o.f.Target].devices, w.events)
	}
}

// recovery says how the system recovered from o.
func (w *world) recovery(o *outcome) string {
	switch o.f.Kind {
	case chaos.KindNATS:
		s := "led " + strings.Join(o.ledOn, " and ")
		if len(o.ledOn) == 0 {
			s = "led neither the ledger nor " + events.StreamRollout
		}
		if at, ok := w.ledger.FirstAckAfter(o.killed); ok {
			s += "; ledger acknowledged again after " + at.Sub(o.killed).Round(time.Millisecond).String()
		} else {
			s += "; ledger never acknowledged again"
		}
		return s
	case chaos.KindOperator:
		if !o.leaderBefore {
			return "a follower: no takeover needed"
		}
		if o.takeover.IsZero() {
			return "the leader: no takeover seen before the replica was back"
		}
		return "the leader: the other replica led after " + o.takeover.Sub(o.killed).Round(100*time.Millisecond).String()
	case chaos.KindCallout:
		if o.serving.IsZero() {
			return "the other replica answered meanwhile; the restarted one was not seen serving before the run ended"
		}
		return "the other replica answered meanwhile; the restarted one served " + o.serving.Sub(o.restored).Round(100*time.Millisecond).String() +
			" after its start (seen within 0.1 s)"
	case chaos.KindAgent:
		devs := w.agents[o.f.Target].devices
		mine := map[string]bool{}
		for _, d := range devs {
			mine[d] = true
		}
		last := time.Duration(0)
		w.connMu.Lock()
		seen := map[string]bool{}
		for _, e := range w.conns {
			if mine[e.Device] && !e.At.Before(o.restored) && e.Event == "connected" && !seen[e.Device] {
				seen[e.Device] = true
				last = max(last, e.At.Sub(o.restored))
			}
		}
		w.connMu.Unlock()
		n := 0
		for _, d := range devs {
			if seen[d] {
				n++
			}
		}
		return fmt.Sprintf("%d of %d devices connected again %s after the restart", n, len(devs), last.Round(time.Millisecond))
	}
	return ""
}
