package bench

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

// TestMain lets the test binary be its own child process, as fleet-scale
// is: "<test binary> child <mode> ...".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		if err := RunChild(context.Background(), os.Args[2:], os.Stdin, os.Stdout, log); err != nil {
			log.Error("child failed", "error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestTwentyDevicesConvergeThroughTheCalloutAndTheConsumerCountDoesNotGrow(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Sizes: []int{10, 20}, PerProcess: 12, ConnectRate: 100, Timeout: time.Minute,
		Exe: exe, DataDir: t.TempDir(), Out: &out,
		// Cached keys: enrollment uploads their public halves (the
		// 1,000-device test below has the provider generate them).
		KeyCache: KeyCache{Dir: t.TempDir(), PerFile: 7},
		Logger:   slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	for _, r := range res {
		if r.Children != (r.N+11)/12 {
			t.Errorf("N=%d ran in %d child processes, want %d", r.N, r.Children, (r.N+11)/12)
		}
		if r.ConsumersGrew() {
			t.Errorf("N=%d: consumers %v grew with the devices", r.N, r.Consumers)
		}
		if r.Converged <= 0 || r.Succeeded <= 0 || r.FloorAsync <= 0 || r.FloorSync <= 0 || r.Ramp <= 0 || r.FloorStoredAsync <= 0 || r.FloorStoredSync <= 0 {
			t.Errorf("N=%d: a figure is missing: %+v", r.N, r)
		}
	}
	if !strings.Contains(out.String(), "N=20 devices (2 agent process(es), the embedded server)") {
		t.Errorf("the printed figures lack the N=20 line")
	}
}

func TestAFloodingDeviceNeitherStopsAThousandDeviceRolloutNorChangesAnyTargetsStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("enrolls 1,001 devices (an RSA key each) and rolls out to 1,000")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The runner logs every record it skips at warning level: errors only.
	res, err := Run(ctx, Options{
		Sizes: []int{n}, Flooders: 1, ConnectRate: testConnectRate, Timeout: 2 * time.Minute,
		Exe: exe, DataDir: t.TempDir(), Out: &out,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
	})
	t.Log("\n" + out.String())
	// Run fails when a device did not converge or the runner did not append
	// rollout.succeeded before the phase deadline, when the runner (or
	// another control plane component) stopped, and when the runner counted
	// a report that was not a target's own (ErrMiscounted).
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].Flood == nil {
		t.Fatalf("no rollout under a flood was measured: %+v", res)
	}
	r, f := res[0], res[0].Flood
	if r.ConnectRetries != 0 {
		t.Logf("%d connect attempts were retried at %v connects/s: the callout did not keep up on this machine", r.ConnectRetries, testConnectRate)
	}
	if f.ConvergedAtSucceeded != n {
		t.Errorf("rollout.succeeded arrived when %d of %d targets had reported Converged themselves: forged reports counted", f.ConvergedAtSucceeded, n)
	}
	if f.RunnerMaxFailed != 0 {
		t.Errorf("the runner showed %d failed targets; none failed: forged reports counted", f.RunnerMaxFailed)
	}
	if f.RunnerMaxDegraded != 0 {
		t.Errorf("the runner showed %d degraded targets; none degraded: forged health reports counted", f.RunnerMaxDegraded)
	}
	if h := f.ByKind[string(events.ReportHealth)]; h.Published == 0 {
		t.Errorf("the flooder published no health report")
	}
	// The flood must have reached the stream and the runner, or the test
	// shows nothing.
	if w := f.ByKind[string(events.ReportWorkload)]; w.Published == 0 || f.IngestedReports <= uint64(2*n) {
		t.Errorf("the flooder published %d workload reports and %s took %d messages, no more than the %d targets' own two each: the flood never reached the stream",
			w.Published, events.StreamReports, f.IngestedReports, n)
	}
	if f.RunnerSkipped == 0 {
		t.Errorf("the runner skipped no record: the flooder's forged reports never reached it")
	}
	if f.InReports == 0 || f.InTelemetry == 0 {
		t.Errorf("the flooder's messages held after the flood: %d in %s, %d in %s; want some in both", f.InReports, events.StreamReports, f.InTelemetry, events.StreamTelemetry)
	}
	if f.InTelemetry > 3*events.DefaultTelemetryPerSubject {
		t.Errorf("%s holds %d of the flooder's messages; it keeps %d per subject (3 subjects: heartbeat, inventory, containers)",
			events.StreamTelemetry, f.InTelemetry, events.DefaultTelemetryPerSubject)
	}
}

// testConnectRate is the connect rate of the 1,000-device test: the
// default, a 10 s ramp window (200 per second overloaded the callout on the
// shared 2-core machine: 233 retried connects, a 13 s ramp).
const testConnectRate = DefaultConnectRate

func TestTwentyDevicesConvergeOnAClusterOfThreeServers(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	profiles := t.TempDir()
	res, err := Run(ctx, Options{
		Sizes: []int{20}, PerProcess: 7, Servers: 3, ConnectRate: 100, Timeout: 2 * time.Minute, MemProfiles: profiles,
		Exe: exe, DataDir: t.TempDir(), Out: &out, KeyCache: KeyCache{Dir: t.TempDir(), PerFile: 10}, DistinctKeys: 7,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	r := res[0]
	if r.Children != 3 || r.Servers != 3 {
		t.Errorf("ran in %d agent processes on %d servers, want 3 on 3 (one per server)", r.Children, r.Servers)
	}
	if r.ConsumersGrew() {
		t.Errorf("consumers %v grew with the devices", r.Consumers)
	}
	if r.Converged <= 0 || r.FloorAsync <= 0 || r.FloorStoredAsync < r.FloorAsync || r.ServerRSSBefore == 0 || r.ServerRSSAfter == 0 {
		t.Errorf("a figure is missing: %+v", r)
	}
	if r.ServerHeapBefore.Heap == 0 || r.ServerHeapAfter.Heap == 0 || r.ServerHeapAfter.Stacks == 0 || r.AgentHeap == 0 || r.AgentStacks == 0 || r.AgentGoroutines < 20 {
		t.Errorf("a memory figure is missing: server heap %d → %d, agents' heap %d, stacks %d, goroutines %d",
			r.ServerHeapBefore, r.ServerHeapAfter, r.AgentHeap, r.AgentStacks, r.AgentGoroutines)
	}
	entries, err := os.ReadDir(profiles)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	want := []string{"child-agents-1-6.goroutines.txt", "child-agents-1-6.heap.pprof", "child-agents-14-20.goroutines.txt", "child-agents-14-20.heap.pprof",
		"child-agents-7-13.goroutines.txt", "child-agents-7-13.heap.pprof", "server-n1.heap.pprof", "server-n2.heap.pprof", "server-n3.heap.pprof"}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("the heap profiles written (-want +got):\n%s", diff)
	}
	if !strings.Contains(out.String(), "(7 distinct keys: device i has key i mod 7)") {
		t.Errorf("the printed figures do not say the devices shared 7 keys")
	}
	if !strings.Contains(out.String(), "a cluster of 3 nats-server processes") || !strings.Contains(out.String(), "in the nats-server processes") {
		t.Errorf("the printed figures do not say the run was on the cluster")
	}
}

func TestDevicesHeldPastTheirTokenLifetimeAreReauthorisedAndStillConverge(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const n = 10
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Held for three lifetimes: every device's user JWT expires at least
	// once, and its connection is closed and authorised again.
	res, err := Run(ctx, Options{
		Sizes: []int{n}, PerProcess: 12, ConnectRate: 100, Timeout: time.Minute,
		TokenLifetime: 20 * time.Second, Hold: time.Minute,
		Exe: exe, DataDir: t.TempDir(), Out: &out,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	h := res[0].Hold
	if h == nil {
		t.Fatal("no hold was measured")
	}
	if h.Allowed < n {
		t.Errorf("%d authorisations over a hold of three token lifetimes for %d devices, want at least one reconnect each", h.Allowed, n)
	}
	if h.Converged <= 0 || h.CPU <= 0 {
		t.Errorf("a figure is missing: %+v", h)
	}
	if !strings.Contains(out.String(), "every device converged on the revision after the hold") {
		t.Errorf("the printed figures lack the hold's goal line")
	}
}
