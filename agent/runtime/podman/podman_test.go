package podman_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/specgen"
	dockercontainer "github.com/docker/docker/api/types/container"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/agent/runtime/runtimetest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// The conformance images: busybox commands on the base image. A shell trap
// makes SIGTERM end a container (busybox as PID 1 ignores it); plain sleep
// as PID 1 ignores it.
var (
	runningFile     = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
	ignoresTermFile = "CMD [\"sleep\", \"3600\"]\n"
	exit3File       = "CMD [\"sh\", \"-c\", \"exit 3\"]\n"
	mountCheckFile  = "CMD [\"sh\", \"-c\", \"test \\\"$(cat " + runtimetest.MountPath + "/" + runtimetest.MountMarker + ")\\\" = " +
		runtimetest.MountMarkerContent + " || exit " + strconv.Itoa(runtimetest.MountCheckMissing) +
		"; touch " + runtimetest.MountPath + "/written 2>/dev/null || exit " + strconv.Itoa(runtimetest.MountCheckReadOnly) + "\"]\n"
	envCheckFile = "CMD [\"sh\", \"-c\", \"test \\\"$" + runtimetest.EnvCheckVar + "\\\" = " + runtimetest.EnvCheckValue + "\"]\n"
	// printsFile prints runtimetest.PrintedLines: the first on stderr, the
	// others a second later on stdout (two pipes are read in no set
	// order), then runs until stopped.
	printsFile = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; echo '" + runtimetest.PrintedLines[0] + "' >&2; sleep 1; " +
		"echo '" + runtimetest.PrintedLines[1] + "'; echo '" + runtimetest.PrintedLines[2] + "'; echo '" + runtimetest.PrintedLines[3] + "'; " +
		"sleep 3600 & wait\"]\n"
	// crashableFile exits with runtimetest.CrashExitCode on SIGUSR1 (which
	// crash sends from inside), and with 0 on SIGTERM.
	crashableFile = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; trap 'exit " + strconv.Itoa(runtimetest.CrashExitCode) +
		"' USR1; while true; do sleep 3600 & wait; done\"]\n"
)

// newRuntime connects podmantest (cleanup by label, the testenv policy for a
// missing service) and the Runtime under test to the same socket.
func newRuntime(tb testing.TB) (*podman.Runtime, context.Context) {
	tb.Helper()
	ctx := podmantest.Connect(tb)
	sock, err := podmantest.SocketPath()
	if err != nil {
		tb.Fatal(err)
	}
	rt, err := podman.New(tb.Context(), podman.Options{URI: "unix://" + sock})
	if err != nil {
		testenv.Missing(tb, "Podman API service", podmantest.SetupCommand, err)
	}
	tb.Cleanup(func() { _ = rt.Close() })
	return rt, ctx
}

func TestConformance(t *testing.T) {
	runtimetest.Run(t, func(t *testing.T) (runtime.Runtime, runtimetest.Fixture) {
		rt, ctx := newRuntime(t)
		return rt, runtimetest.Fixture{
			Labels:      podmantest.Labels(t),
			Running:     localImage(t, "running", runningFile),
			IgnoresTerm: localImage(t, "ignore-term", ignoresTermFile),
			Exit3:       localImage(t, "exit-3", exit3File),
			EnvCheck:    localImage(t, "envcheck", envCheckFile),
			MountCheck:  localImage(t, "mountcheck", mountCheckFile),
			HostPort:    freePort,
			Registry: func(t *testing.T) runtimetest.Registry {
				return privateRegistry(ctx, t)
			},
			Unreachable: func(t *testing.T) string {
				return fmt.Sprintf("127.0.0.1:%d/fleet-conformance/unreachable:v1", freePort(t))
			},
			CreateForeign: func(t *testing.T) string {
				return createForeign(ctx, t, localImage(t, "running", runningFile))
			},
			RestartPolicy: func(t *testing.T, id string) string {
				p, err := rt.RestartPolicy(t.Context(), id)
				if err != nil {
					t.Fatalf("restart policy of %s: %v", id, err)
				}
				return p
			},
			Prints:    localImage(t, "prints", printsFile),
			Crashable: localImage(t, "crashable", crashableFile),
			Crash: func(t *testing.T, id string) {
				crash(ctx, t, id)
			},
			HealthPasses: []string{"/bin/true"},
			HealthFails:  []string{"/bin/sh", "-c", "echo not ready; exit 1"},
		}
	})
}

var (
	imagesMu sync.Mutex // guards built
	built    = map[string]string{}
)

// localImage builds FROM the base image plus tail once per test process,
// tagged by content (localhost/fleet-conformance/<name>:<hash>), and returns
// its reference. An image left by an earlier run is reused.
func localImage(tb testing.TB, name, tail string) string {
	tb.Helper()
	imagesMu.Lock()
	defer imagesMu.Unlock()
	containerfile := "FROM " + podmantest.BaseImage + "\n" + tail
	if ref, ok := built[containerfile]; ok {
		return ref
	}
	sum := sha256.Sum256([]byte(containerfile))
	ref := "localhost/fleet-conformance/" + name + ":" + hex.EncodeToString(sum[:6])
	ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
	defer cancel()
	conn := podmantest.Connect(tb)
	if ok, err := images.Exists(conn, ref, nil); err == nil && ok {
		built[containerfile] = ref
		return ref
	}
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		testenv.Missing(tb, "buildah", podmantest.SetupCommand, err)
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		tb.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, buildah, "bud", "--quiet", "--pull=never", "--tag", ref,
		"--file", filepath.Join(dir, "Containerfile"), dir).CombinedOutput()
	if err != nil {
		tb.Fatalf("buildah bud %s: %v\n%s", ref, err, out)
	}
	built[containerfile] = ref
	return ref
}

var (
	pushedMu sync.Mutex // guards pushed
	pushed   string
)

// privateRegistry pushes the private image once per test process and
// removes its local copy, so that every case starts without it.
func privateRegistry(ctx context.Context, t *testing.T) runtimetest.Registry {
	t.Helper()
	reg := podmantest.TestRegistry(t)
	pushedMu.Lock()
	if pushed == "" {
		pushed = podmantest.PushImage(t, reg, "fleet-conformance/private",
			"FROM "+podmantest.BaseImage+"\n"+runningFile)
	}
	ref := pushed
	pushedMu.Unlock()
	removeImage := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, errs := images.Remove(cctx, []string{ref}, new(images.RemoveOptions).WithForce(true).WithIgnore(true))
		for _, err := range errs {
			t.Logf("remove %s: %v", ref, err)
		}
	}
	removeImage()
	t.Cleanup(removeImage)
	return runtimetest.Registry{
		Private: ref,
		Auth:    runtime.RegistryAuth{Username: reg.Username, Password: reg.Password},
		Missing: reg.Addr + "/fleet-conformance/missing:absent",
	}
}

// freePort returns a TCP port nothing listens on right now.
func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// createForeign creates and starts a container straight through the
// bindings, with only the harness's cleanup labels.
func createForeign(ctx context.Context, t *testing.T, image string) string {
	t.Helper()
	s := specgen.NewSpecGenerator(image, false)
	s.Name = "foreign-" + randomSuffix(t)
	s.Labels = podmantest.Labels(t)
	resp, err := containers.CreateWithSpec(ctx, s, nil)
	if err != nil {
		t.Fatalf("create foreign container: %v", err)
	}
	if err := containers.Start(ctx, resp.ID, nil); err != nil {
		t.Fatalf("start foreign container: %v", err)
	}
	return s.Name
}

// crash makes a container of the crashable image exit by itself: an exec
// signals its process 1 (a stop would be the user's doing, and Podman
// would not restart it).
func crash(ctx context.Context, t *testing.T, id string) {
	t.Helper()
	session, err := containers.ExecCreate(ctx, id, &handlers.ExecCreateConfig{
		ExecOptions: dockercontainer.ExecOptions{Cmd: []string{"kill", "-USR1", "1"}},
	})
	if err != nil {
		t.Fatalf("exec in %s: %v", id, err)
	}
	if err := containers.ExecStart(ctx, session, nil); err != nil {
		t.Fatalf("start the exec in %s: %v", id, err)
	}
}

func randomSuffix(tb testing.TB) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestNewFailsWhenNoServiceAnswers(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "podman.sock")
	_, err := podman.New(t.Context(), podman.Options{URI: "unix://" + sock})
	if err == nil {
		t.Fatal("New succeeded without a service on the socket")
	}
	if _, err := podman.New(t.Context(), podman.Options{URI: "tcp://127.0.0.1:1"}); !errors.Is(err, podman.ErrOptions) {
		t.Errorf("New with a TCP URI: %v, want ErrOptions", err)
	}
}

func TestTheRuntimeOutlivesTheContextNewWasGiven(t *testing.T) {
	podmantest.Connect(t)
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	rt, err := podman.New(ctx, podman.Options{URI: "unix://" + sock})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	cancel()
	if _, err := rt.List(t.Context()); err != nil {
		t.Errorf("List after New's context ended: %v", err)
	}
	if err := rt.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := rt.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := rt.ImageExists(t.Context(), podmantest.BaseImage); err != nil {
		t.Errorf("ImageExists after Close: %v", err)
	}
}
