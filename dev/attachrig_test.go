package dev_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// attachRig is where a test of a real fleet-agent attached to fleet dev
// with `fleet enroll --dev` (docs/fleet.md) starts: real Podman and the
// test's image, the built fleet and fleet-agent binaries, a device id of
// the test's own whose containers are removed at its end, and a fleet dev
// on loopback with one simulated device, stopped at the test's end.
type attachRig struct {
	conn  context.Context // the Podman connection
	sock  string          // Podman's socket path
	image string
	fleet string // the fleet binary
	agent string // the fleet-agent binary
	dev   string
	dir   string // fleet dev's data folder
	p     *devProc
}

// newAttachRig builds image from containerfile and names the device
// devPrefix-<random>. It skips without Podman or Kubernetes binaries (and
// fails under CI=true).
func newAttachRig(t *testing.T, image, containerfile, devPrefix string) *attachRig {
	t.Helper()
	testenv.Exclusive(t, testenv.PodmanExamples)
	needKube(t)
	natsCLI(t)
	conn := podmantest.Connect(t) // fails under CI=true, skips elsewhere, without Podman
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	r := &attachRig{conn: conn, sock: sock, image: podmantest.BuildImage(t, image, containerfile),
		fleet: fleetBinary(t), agent: agentBinary(t), dev: devPrefix + "-" + randomHex(t, 4), dir: t.TempDir()}
	// The agent labels its containers with its device id, unique to this
	// test: whatever a failed run leaves is removed.
	podmantest.RemoveLabelledAtCleanup(t, conn, "fleet.nationtech.io/device", r.dev)
	r.p = startDev(t, r.dir, "--devices", "1", "--runtime", "sim", "--listen", "127.0.0.1")
	t.Cleanup(func() { r.p.stop(t) })
	return r
}

// keyFile is where enroll writes the device's key: fleet dev's data
// folder.
func (r *attachRig) keyFile() string { return filepath.Join(r.dir, "devices", r.dev+".key.json") }

// enroll runs, on the laptop, `fleet enroll --dev` for the rig's device
// with label (key=value), its agent on Podman's socket: what it printed,
// and the fleet-agent command line it printed.
func (r *attachRig) enroll(t *testing.T, ctx context.Context, label string) (printed, line string) {
	t.Helper()
	return enrollDev(t, ctx, r.fleet, r.dir, r.dev, "--label", label, "--agent-key-file", r.keyFile(), "--agent-podman-socket", "unix://"+r.sock)
}

// enrollDev runs `fleet enroll --dev` (the binary fleet) on fleet dev's
// data folder dir for device dev, with flags: what it printed, and the
// fleet-agent command line it printed.
func enrollDev(t *testing.T, ctx context.Context, fleet, dir, dev string, flags ...string) (printed, line string) {
	t.Helper()
	args := append([]string{"enroll", "--dev", "--data-dir", dir}, flags...)
	enroll := exec.CommandContext(ctx, fleet, append(args, dev)...)
	enroll.Env = cleanEnv()
	out, err := enroll.CombinedOutput()
	if err != nil {
		t.Fatalf("fleet enroll --dev: %v\n%s", err, out)
	}
	m := reAgentCommand.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("fleet enroll --dev printed no fleet-agent command line:\n%s", out)
	}
	return string(out), m[1]
}

// startAgent runs, on the device, exactly the command line enroll
// printed, fleet-agent found on PATH.
func (r *attachRig) startAgent(t *testing.T, line string) *agentProc {
	t.Helper()
	return startAgent(t, []string{"bash", "-c", "exec " + line}, append(cleanEnv(), "PATH="+filepath.Dir(r.agent)+":"+systemPATH))
}
