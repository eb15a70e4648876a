package podmantest_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// create makes a container from image with the test's labels.
func create(ctx context.Context, t *testing.T, image string, labels map[string]string, init bool, cmd ...string) string {
	t.Helper()
	s := specgen.NewSpecGenerator(image, false)
	s.Name = "podmantest-" + randomSuffix(t)
	s.Labels = labels
	s.Command = cmd
	if init {
		// catatonit as PID 1 forwards SIGTERM; busybox as PID 1 ignores it.
		s.Init = &init
	}
	resp, err := containers.CreateWithSpec(ctx, s, nil)
	if err != nil {
		t.Fatalf("create container from %s: %v", image, err)
	}
	return resp.ID
}

func TestAContainerIsCreatedStartedInspectedStoppedAndRemoved(t *testing.T) {
	ctx := podmantest.Connect(t)
	id := create(ctx, t, podmantest.BaseImage, podmantest.Labels(t), true, "sleep", "3600")

	if err := containers.Start(ctx, id, nil); err != nil {
		t.Fatalf("start: %v", err)
	}
	data, err := containers.Inspect(ctx, id, nil)
	if err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if !data.State.Running {
		t.Fatalf("after start the container is %q, want running", data.State.Status)
	}
	if got := data.Config.Labels[podmantest.LabelKey]; got != t.Name() {
		t.Errorf("label %s = %q, want %q", podmantest.LabelKey, got, t.Name())
	}

	// The exit code, not the time the stop took, tells whether the
	// container ended on SIGTERM (the init process forwards it) or on the
	// SIGKILL after the timeout (137): timing depends on machine load.
	const stopTimeout = 10
	if err := containers.Stop(ctx, id, new(containers.StopOptions).WithTimeout(stopTimeout)); err != nil {
		t.Fatalf("stop: %v", err)
	}
	data, err = containers.Inspect(ctx, id, nil)
	if err != nil {
		t.Fatalf("inspect after stop: %v", err)
	}
	if data.State.Running {
		t.Fatalf("after stop the container is %q, want exited", data.State.Status)
	}
	if data.State.ExitCode == 137 {
		t.Errorf("the container was killed after the stop timeout (exit 137): SIGTERM was not honoured (no init process?)")
	}

	if _, err := containers.Remove(ctx, id, nil); err != nil {
		t.Fatalf("remove: %v", err)
	}
	exists, err := containers.Exists(ctx, id, nil)
	if err != nil {
		t.Fatalf("exists: %v", err)
	}
	if exists {
		t.Error("the container still exists after remove")
	}
}

func TestConnectRemovesLeftoversOfDeadTestProcessesOnly(t *testing.T) {
	ctx := podmantest.Connect(t)
	// A PID above the kernel's maximum (2^22) never runs.
	dead := create(ctx, t, podmantest.BaseImage, map[string]string{
		podmantest.LabelKey: "TestOfADeadProcess", podmantest.PIDLabelKey: strconv.Itoa(1 << 23),
	}, false, "true")
	// The parent of this test binary (go test) runs, like a test process
	// working in parallel would.
	alive := create(ctx, t, podmantest.BaseImage, map[string]string{
		podmantest.LabelKey: "TestOfAnotherProcess", podmantest.PIDLabelKey: strconv.Itoa(os.Getppid()),
	}, false, "true")
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = containers.Remove(cctx, alive, new(containers.RemoveOptions).WithForce(true).WithIgnore(true))
	})

	t.Run("a second test connects", func(t *testing.T) { podmantest.Connect(t) })

	for _, c := range []struct {
		id   string
		want bool
	}{{dead, false}, {alive, true}} {
		got, err := containers.Exists(ctx, c.id, nil)
		if err != nil {
			t.Fatalf("exists: %v", err)
		}
		if got != c.want {
			t.Errorf("container %s exists = %v, want %v", c.id[:12], got, c.want)
		}
	}
}

func TestAPushedImageIsPulledByDigestOnlyWithCredentials(t *testing.T) {
	ctx := podmantest.Connect(t)
	reg := podmantest.TestRegistry(t)
	marker := "built-" + randomSuffix(t)
	ref := podmantest.PushImage(t, reg, "podmantest/smoke",
		"FROM "+podmantest.BaseImage+"\nRUN echo "+marker+" > /marker\nCMD [\"cat\", \"/marker\"]\n")
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = images.Remove(cctx, []string{ref}, new(images.RemoveOptions).WithForce(true).WithIgnore(true))
	})

	t.Run("the registry serves the digest buildah reported", func(t *testing.T) {
		checkRegistryHasManifest(t, reg, ref)
	})

	if exists, err := images.Exists(ctx, ref, nil); err != nil || exists {
		t.Fatalf("before the pull: images.Exists = %v, %v; want false (PushImage removes the local copy)", exists, err)
	}

	t.Run("an anonymous pull is an authentication failure", func(t *testing.T) {
		_, err := images.Pull(ctx, ref, new(images.PullOptions).WithQuiet(true))
		if !podmantest.IsAuthFailure(err) {
			t.Fatalf("anonymous pull: %v; want an authentication failure", err)
		}
		t.Logf("refused as expected: %v", err)
	})
	t.Run("a pull with a wrong password is an authentication failure", func(t *testing.T) {
		_, err := images.Pull(ctx, ref, new(images.PullOptions).WithQuiet(true).
			WithUsername(reg.Username).WithPassword("not-"+reg.Password))
		if !podmantest.IsAuthFailure(err) {
			t.Fatalf("pull with a wrong password: %v; want an authentication failure", err)
		}
		t.Logf("refused as expected: %v", err)
	})

	pulled, err := images.Pull(ctx, ref, new(images.PullOptions).WithQuiet(true).
		WithUsername(reg.Username).WithPassword(reg.Password))
	if err != nil {
		t.Fatalf("pull with credentials: %v", err)
	}
	if podmantest.IsAuthFailure(err) || len(pulled) != 1 {
		t.Fatalf("pull with credentials returned images %v", pulled)
	}
	img, err := images.GetImage(ctx, ref, nil)
	if err != nil {
		t.Fatalf("inspect the pulled image: %v", err)
	}
	if !slices.Contains(img.RepoDigests, ref) {
		t.Errorf("pulled image digests %v do not contain %s", img.RepoDigests, ref)
	}

	t.Run("a container from the pulled image runs the built content", func(t *testing.T) {
		id := create(ctx, t, ref, podmantest.Labels(t), false)
		if err := containers.Start(ctx, id, nil); err != nil {
			t.Fatalf("start: %v", err)
		}
		code, err := containers.Wait(ctx, id, new(containers.WaitOptions).WithConditions([]string{"exited", "stopped"}))
		if err != nil || code != 0 {
			t.Fatalf("wait: exit code %d, %v", code, err)
		}
		if got := logs(ctx, t, id); strings.TrimSpace(got) != marker {
			t.Errorf("container output %q, want %q", got, marker)
		}
	})
}

// logs returns a container's standard output.
func logs(ctx context.Context, t *testing.T, id string) string {
	t.Helper()
	stdout, stderr := make(chan string), make(chan string)
	var b strings.Builder
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case s, ok := <-stdout:
				if !ok {
					return
				}
				b.WriteString(s)
			case <-stderr:
			}
		}
	})
	err := containers.Logs(ctx, id, new(containers.LogOptions).WithStdout(true).WithStderr(true), stdout, stderr)
	close(stdout)
	wg.Wait()
	if err != nil {
		t.Fatalf("logs: %v", err)
	}
	return b.String()
}

// checkRegistryHasManifest asks the registry itself, over TLS with the
// setup's CA, for the manifest at ref's digest.
func checkRegistryHasManifest(t *testing.T, reg podmantest.Registry, ref string) {
	t.Helper()
	repoAndDigest := strings.TrimPrefix(ref, reg.Addr+"/")
	repo, digest, ok := strings.Cut(repoAndDigest, "@")
	if !ok {
		t.Fatalf("%s is not a reference by digest", ref)
	}
	run, err := podmantest.RunDir()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(run, "registry", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, "https://"+reg.Addr+"/v2/"+repo+"/manifests/"+digest, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(reg.Username, reg.Password)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("HEAD manifest: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HEAD manifest %s: %s", digest, resp.Status)
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != digest {
		t.Errorf("registry digest %s, buildah reported %s", got, digest)
	}
}
