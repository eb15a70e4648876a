// Package podmantest connects tests to the real Podman started by `task
// setup:podman`: the Podman API service on .cache/run/podman.sock (reached
// with the github.com/containers/podman/v5 bindings, built with CGO_ENABLED=0
// and the tags `remote exclude_graphdriver_btrfs containers_image_openpgp`),
// the base image localhost/fleet-base:latest and the TLS test registry (on
// 127.0.0.1:5000, or the free port setup chose, read with its credentials
// from .cache/run/registry.env). It owns the test container labels and
// the removal of labelled containers before and after each test, and
// classifies registry authentication failures.
//
// Invariants: it only ever removes containers that carry LabelKey, or the
// key=value label a test names as its own (RemoveLabelledAtCleanup); a test
// removes its own containers, and containers of test processes that no
// longer run, never those of another running test process. When the Podman
// service or the registry is missing it follows the testenv policy: fail with
// CI=true, skip elsewhere, naming `go tool -modfile=tools/go.mod task
// setup:podman`.
//
// Only tests and the Debian root harness (internal/testenv/debianroot)
// import this package. It links no Kubernetes code (only the
// sigs.k8s.io/yaml library the Podman bindings use), so agent tests may use
// it; internal/hygiene checks both.
package podmantest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/nationtech/harmony-fleet/internal/procfs"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

const (
	// BaseImage is the image every test container starts from: busybox-static
	// imported by `task setup:podman` (nothing can be pulled from the
	// internet here).
	BaseImage = "localhost/fleet-base:latest"

	// LabelKey marks a container as made by a test; its value is the test's
	// name. Only containers carrying it are ever removed by this package.
	LabelKey = "io.nationtech.harmony-fleet.test"

	// PIDLabelKey holds the PID of the test process that made the container,
	// so leftovers of a dead test process can be told from containers of one
	// still running in parallel.
	PIDLabelKey = "io.nationtech.harmony-fleet.test.pid"

	// SetupCommand installs and starts everything this package needs.
	SetupCommand = "go tool -modfile=tools/go.mod task setup:podman"
)

// cleanupTimeout bounds the removal of a test's containers.
const cleanupTimeout = time.Minute

// Labels returns the labels that mark a container as made by tb in this
// process. Put them on every container a test creates.
func Labels(tb testing.TB) map[string]string {
	return map[string]string{
		LabelKey:    tb.Name(),
		PIDLabelKey: strconv.Itoa(os.Getpid()),
	}
}

// Connect returns a context carrying a connection to the Podman API service,
// for the bindings' functions. The context ends with the test. Before it
// returns it removes the containers of tb left by an earlier run of the same
// process and those of test processes that no longer run; when the test
// ends, it removes every container carrying Labels(tb) or the labels of one
// of its subtests.
//
// A missing socket or a service that does not answer applies the testenv
// policy (fail in CI, skip elsewhere).
func Connect(tb testing.TB) context.Context {
	tb.Helper()
	sock, err := SocketPath()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(sock); err != nil {
		missing(tb, fmt.Errorf("podmantest: Podman socket: %w", err))
	}
	ctx, err := bindings.NewConnection(tb.Context(), "unix://"+sock)
	if err != nil {
		missing(tb, fmt.Errorf("podmantest: connect to %s: %w", sock, err))
	}

	self := strconv.Itoa(os.Getpid())
	if err := RemoveContainers(ctx, func(labels map[string]string) bool {
		pid, err := strconv.Atoi(labels[PIDLabelKey])
		if err != nil || !procfs.Alive(pid) {
			return true // a leftover of a test process that is gone
		}
		return labels[PIDLabelKey] == self && ownedBy(labels[LabelKey], tb.Name())
	}); err != nil {
		tb.Fatalf("remove leftover test containers: %v", err)
	}

	tb.Cleanup(func() {
		// The test's context is already cancelled when cleanups run.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if err := RemoveContainers(cctx, func(labels map[string]string) bool {
			return labels[PIDLabelKey] == self && ownedBy(labels[LabelKey], tb.Name())
		}); err != nil {
			tb.Errorf("remove the test's containers: %v", err)
		}
	})
	return ctx
}

// RemoveLabelledAtCleanup removes, when tb ends, every container labelled
// key=value, for containers a test does not create itself: those an agent
// under test creates carry the agent's labels, not Labels(tb). value must be
// unique to the test (a device id made for it), because this removes such a
// container whoever made it. It runs on a context of its own: tb's context
// (and a context Connect returned) is already cancelled when cleanups run.
// A failed removal fails the test.
func RemoveLabelledAtCleanup(tb testing.TB, ctx context.Context, key, value string) {
	tb.Helper()
	if key == "" || value == "" {
		tb.Fatalf("podmantest: RemoveLabelledAtCleanup needs a label key and a value unique to the test, got %q=%q", key, value)
	}
	tb.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		list, err := containers.List(cctx, new(containers.ListOptions).
			WithAll(true).
			WithFilters(map[string][]string{"label": {key + "=" + value}}))
		if err != nil {
			tb.Errorf("podmantest: list containers labelled %s=%s: %v", key, value, err)
			return
		}
		for _, c := range list {
			if c.Labels[key] != value {
				continue
			}
			if _, err := containers.Remove(cctx, c.ID, new(containers.RemoveOptions).
				WithForce(true).WithVolumes(true).WithTimeout(0).WithIgnore(true)); err != nil {
				tb.Errorf("podmantest: remove container %s (%s=%s): %v", c.ID, key, value, err)
			}
		}
	})
}

// ownedBy reports whether a container labelled with test name label belongs
// to test: made by it or by one of its subtests.
func ownedBy(label, test string) bool {
	return label == test || strings.HasPrefix(label, test+"/")
}

// missing applies the testenv policy for the Podman service.
func missing(tb testing.TB, err error) {
	tb.Helper()
	testenv.Missing(tb, "Podman API service", SetupCommand, err)
}

// RemoveContainers force-removes (no stop grace period) every container that
// carries LabelKey and for whose labels match returns true, with its
// anonymous volumes. ctx must carry a bindings connection (see Connect).
func RemoveContainers(ctx context.Context, match func(labels map[string]string) bool) error {
	list, err := containers.List(ctx, new(containers.ListOptions).
		WithAll(true).
		WithFilters(map[string][]string{"label": {LabelKey}}))
	if err != nil {
		return fmt.Errorf("podmantest: list test containers: %w", err)
	}
	for _, c := range list {
		if _, ok := c.Labels[LabelKey]; !ok || !match(c.Labels) {
			continue
		}
		_, err := containers.Remove(ctx, c.ID, new(containers.RemoveOptions).
			WithForce(true).WithVolumes(true).WithTimeout(0).WithIgnore(true))
		if err != nil {
			return fmt.Errorf("podmantest: remove container %s: %w", c.ID, err)
		}
	}
	return nil
}
