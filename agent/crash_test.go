package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// buildAgent builds the fleet-agent binary once for this test.
func buildAgent(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "fleet-agent")
	cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-o", bin, "./cmd/fleet-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fleet-agent: %v\n%s", err, out)
	}
	return bin
}

// TestKillNineMidReconcileAndAControlPlaneOutage runs the real agent binary
// on real Podman: it is killed with SIGKILL while an init container runs,
// restarted, and converges without a duplicate container and without
// touching a foreign one; then NATS goes away (containers keep running) and
// comes back, and the agent converges on the newest intent.
func TestKillNineMidReconcileAndAControlPlaneOutage(t *testing.T) {
	w := newPodmanWorld(t)
	sock, _ := podmantest.SocketPath()
	bin := buildAgent(t)
	slowInit := podmantest.BuildImage(t, "slow-init", "CMD [\"sh\", \"-c\", \"sleep 3; exit 0\"]\n")
	runs := podmantest.BuildImage(t, "runs", runsFile)
	runs2 := podmantest.BuildImage(t, "runs2", runsFile+"LABEL v=2\n")

	store := t.TempDir()
	srv := natstest.StartWith(t, natsembed.Options{StoreDir: store, Sync: natsembed.FastSync})
	u, _ := url.Parse(srv.ClientURL())
	port, _ := strconv.Atoi(u.Port())
	admin := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	st, err := events.NewStore(admin, events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(w.ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := st.JetStream().KeyValue(w.ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	device := "crash-" + w.suffix
	w.r.Device = device // the test's cleanup removes what the agent made
	put := func(gen int64, image string) {
		s := score.Score{Data: score.PodmanV0{
			InitContainer: &score.Service{Name: w.name("init"), Image: slowInit},
			Services:      []score.Service{{Name: w.name("svc"), Image: image}},
		}}
		e := w.entry(gen, s)
		b, _ := json.Marshal(events.DeviceIntent{Device: device, Deployments: []events.IntentEntry{e}})
		if _, err := kv.Put(w.ctx, device, b); err != nil {
			t.Fatal(err)
		}
	}
	foreign, err := w.rt.Create(w.ctx, runtime.ContainerSpec{Name: w.name("bystander"), Image: runs, Labels: podmantest.Labels(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.rt.Remove(context.Background(), foreign, true) })
	if err := w.rt.Start(w.ctx, foreign); err != nil {
		t.Fatal(err)
	}

	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "--device", device, "--nats-url", srv.ClientURL(), "--insecure-no-auth",
			"--runtime", "podman", "--podman-socket", "unix://"+sock, "--heartbeat", "1h")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testenv.Eventually(t, what, testTimeout(t), cond)
	}
	converged := func(gen int64) bool {
		rec, err := st.Last(w.ctx, fmt.Sprintf("fleet.report.%s.workload", device))
		if err != nil {
			return false
		}
		ws, _ := events.Decode[events.WorkloadStatus](rec.Event)
		return ws.Generation == gen && ws.Phase == events.WorkloadConverged
	}

	put(1, runs)
	first := start()
	waitFor("the init container to run", func() bool { return w.byName()[w.name("init")].State == runtime.StateRunning })
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	start()
	waitFor("convergence after the restart", func() bool { return converged(1) })
	// One listing can miss a container while another test process removes
	// its own (Podman 4.3's list races with removals): poll for the state,
	// which a real duplicate or a lost init container would never reach.
	var cs map[string]runtime.Container
	owned := func() int {
		n := 0
		for _, c := range cs {
			if c.Labels[agent.LabelDeployment] == "analysis" && c.Labels[agent.LabelNamespace] == w.ns {
				n++
			}
		}
		return n
	}
	if testenv.Poll(context.Background(), testTimeout(t), func() bool {
		cs = w.byName()
		return owned() == 2 && cs[w.name("init")].State == runtime.StateExited && cs[w.name("init")].ExitCode == 0 &&
			cs[w.name("svc")].State == runtime.StateRunning
	}) != nil {
		t.Fatalf("after kill -9 and restart: %d owned containers (want 2: init and service), init %+v, service %+v",
			owned(), cs[w.name("init")], cs[w.name("svc")])
	}
	if b := cs[w.name("bystander")]; b.ID != foreign || b.State != runtime.StateRunning {
		t.Errorf("the foreign container was touched: %+v", b)
	}

	// The control plane goes away: workloads keep running.
	svc := cs[w.name("svc")].ID
	srv.Shutdown()
	if c, err := w.rt.Inspect(w.ctx, svc); err != nil || c.State != runtime.StateRunning {
		t.Errorf("service during the outage: %+v, %v", c, err)
	}
	srv2 := natstest.StartWith(t, natsembed.Options{StoreDir: store, Port: port, Sync: natsembed.FastSync})
	_ = srv2
	waitFor("the admin connection to come back", admin.IsConnected)
	put(2, runs2)
	waitFor("convergence on the newest intent after the outage", func() bool { return converged(2) })
	if c := w.byName()[w.name("svc")]; c.Image != runs2 || c.State != runtime.StateRunning {
		t.Errorf("service after the outage: %+v", c)
	}
}
