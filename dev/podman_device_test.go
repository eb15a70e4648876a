package dev_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// podmanDevice returns the repository's Podman socket for `fleet dev
// --runtime podman`, a connection to it, and a function listing podman-1's
// containers created since the call ("name=state"). When the test ends it
// removes those containers (a failed run leaves them), and only those.
func podmanDevice(t *testing.T) (sock string, conn context.Context, mine func() []string) {
	t.Helper()
	sock = filepath.Join(repoRoot(t), ".cache", "run", "podman.sock")
	if _, err := os.Stat(sock); err != nil {
		testenv.Missing(t, "the Podman API service", dev.SetupPodmanCommand, err)
	}
	began := time.Now()
	conn, err := bindings.NewConnection(t.Context(), "unix://"+sock)
	if err != nil {
		testenv.Missing(t, "the Podman API service", dev.SetupPodmanCommand, err)
	}
	mine = func() []string {
		t.Helper()
		list, err := containers.List(conn, new(containers.ListOptions).WithAll(true).
			WithFilters(map[string][]string{"label": {"fleet.nationtech.io/device=" + dev.PodmanDevice}}))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range list {
			if !c.Created.Before(began.Add(-time.Second)) {
				out = append(out, c.Names[0]+"="+c.State)
			}
		}
		return out
	}
	t.Cleanup(func() {
		// t.Context(), and so conn, is already cancelled when cleanups run.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(conn), time.Minute)
		defer cancel()
		list, err := containers.List(cctx, new(containers.ListOptions).WithAll(true).
			WithFilters(map[string][]string{"label": {"fleet.nationtech.io/device=" + dev.PodmanDevice}}))
		if err != nil {
			t.Errorf("list podman-1's containers: %v", err)
		}
		for _, c := range list {
			if !c.Created.Before(began.Add(-time.Second)) {
				if _, err := containers.Remove(cctx, c.ID, new(containers.RemoveOptions).WithForce(true).WithTimeout(0).WithIgnore(true)); err != nil {
					t.Errorf("remove %s: %v", c.Names, err)
				}
			}
		}
	})
	return sock, conn, mine
}
