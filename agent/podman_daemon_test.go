package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// TestAPassNeverBlocksTheAgentOnRealPodman: the agent on real Podman keeps
// sending heartbeats and answering commands while a pass waits on an init
// container that does not end, and a newer intent cancels that pass: the
// newer revision converges and the waiting init container is replaced.
func TestAPassNeverBlocksTheAgentOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	runs := podmantest.BuildImage(t, "runs", runsFile)
	ok0 := podmantest.BuildImage(t, "exit0", exit0File)
	d := w.runDaemon(t, agent.Options{HeartbeatInterval: 50 * time.Millisecond})
	put, reported, st := d.put, d.reported, d.st

	hangs := score.Score{Data: score.PodmanV0{
		InitContainer: &score.Service{Name: w.name("migrate"), Image: runs}, // never exits
		Services:      []score.Service{{Name: w.name("api"), Image: runs}},
	}}
	put(1, hangs)
	testenv.Eventually(t, "the init container to run", testTimeout(t), func() bool {
		return w.byName()[w.name("migrate")].State == runtime.StateRunning
	})
	// Heartbeats are telemetry: the stream keeps the last few per
	// device; their sequence says how many were made.
	beat := func() uint64 {
		r, err := st.Last(w.ctx, "fleet.report."+w.device+".heartbeat")
		if err != nil {
			return 0
		}
		return r.Sequence
	}
	beats := beat()
	testenv.Eventually(t, "heartbeats while the pass waits on the init container", testTimeout(t), func() bool {
		return beat() >= beats+3
	})
	if w.byName()[w.name("migrate")].State != runtime.StateRunning {
		t.Fatal("the init container ended before the newer intent came")
	}

	fixed := hangs
	fixed.Data.InitContainer = &score.Service{Name: w.name("migrate"), Image: ok0}
	put(2, fixed)
	testenv.Eventually(t, "generation 2 to converge", testTimeout(t), func() bool { return reported(2, events.WorkloadConverged) })
	cs := w.byName()
	if c := cs[w.name("migrate")]; c.Image == runs || c.State != runtime.StateExited || c.ExitCode != 0 {
		t.Errorf("init container %+v, want generation 2's, exited 0", c)
	}
	if c := cs[w.name("api")]; c.State != runtime.StateRunning || c.Labels[agent.LabelGeneration] != "2" {
		t.Errorf("service %+v, want generation 2's, running", c)
	}
	if reported(1, events.WorkloadConverged) || reported(1, events.WorkloadFailed) {
		t.Error("the cancelled generation 1 was reported converged or failed")
	}
}

// TestEachPodmanWorldIsADeviceOfItsOwn: the tests on real Podman share the
// machine's one engine with every other run of them (another process,
// another checkout, all at once on a loaded machine). A pass removes the
// containers of its device whose Deployment is not on its intent, so a
// world's agent must be a device of its own: with one device id for all,
// another run's pass removes this run's services (their deaths then read
// as Down).
func TestEachPodmanWorldIsADeviceOfItsOwn(t *testing.T) {
	runs := podmantest.BuildImage(t, "runs", runsFile)
	service := func(w *podmanWorld) score.Score {
		return score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: runs}}}}
	}
	a := newPodmanWorld(t)
	da := a.runDaemon(t, agent.Options{})
	da.put(1, service(a))
	testenv.Eventually(t, "the first world's Deployment converges", testTimeout(t), func() bool { return da.reported(1, events.WorkloadConverged) })

	b := newPodmanWorld(t)
	b.ns += "x" // as another run's: its process id differs
	db := b.runDaemon(t, agent.Options{})
	db.put(1, service(b))
	testenv.Eventually(t, "the second world's Deployment converges", testTimeout(t), func() bool { return db.reported(1, events.WorkloadConverged) })

	// What a pass of b's agent removes: the Deployments of its device that
	// its intent lacks.
	have, err := b.r.Deployments(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(have, [][2]string{{b.ns, "analysis"}}) {
		t.Errorf("the second world's agent owns the Deployments %v, want only its own %s/analysis", have, b.ns)
	}
}
