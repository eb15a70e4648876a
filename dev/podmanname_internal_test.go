package dev

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTwoFleetDevRunsOnOneEngineNameTheirPodmanDevicesApart: the first
// run on an engine names its Podman device podman-1; a second run on
// another data folder while the first holds it gets podman-2 (else each
// agent would remove the other's containers); a run on another engine
// gets podman-1 again; a restart of a data folder keeps its name; a name
// released by a run that stopped is free again.
func TestTwoFleetDevRunsOnOneEngineNameTheirPodmanDevicesApart(t *testing.T) {
	root := t.TempDir()
	first, second, other := t.TempDir(), t.TempDir(), t.TempDir()
	const sock, otherSock = "unix:///run/podman/podman.sock", "unix:///run/user/1000/podman/podman.sock"

	n1, release1, err := claimPodmanDevice(root, first, sock)
	if err != nil {
		t.Fatal(err)
	}
	n2, release2, err := claimPodmanDevice(root, second, sock)
	if err != nil {
		t.Fatal(err)
	}
	n3, release3, err := claimPodmanDevice(root, other, otherSock)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"podman-1", "podman-2", "podman-1"}, []string{n1, n2, n3}); diff != "" {
		t.Errorf("device names of the first run, a second one on the same engine, one on another engine (-want +got):\n%s", diff)
	}
	release3()

	// The second run restarts while the first still runs: it keeps its
	// name, recorded in its data folder.
	release2()
	if b, err := os.ReadFile(filepath.Join(second, podmanDeviceFile)); err != nil || string(b) != "podman-2\n" {
		t.Errorf("%s: %q, %v; want podman-2", podmanDeviceFile, b, err)
	}
	again, release2, err := claimPodmanDevice(root, second, sock)
	if err != nil {
		t.Fatal(err)
	}
	if again != "podman-2" {
		t.Errorf("the restarted second run names its device %s, want podman-2 as before", again)
	}
	release2()

	// The first run stopped: a new data folder gets podman-1.
	release1()
	n4, release4, err := claimPodmanDevice(root, t.TempDir(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer release4()
	if n4 != "podman-1" {
		t.Errorf("a run after the first stopped names its device %s, want podman-1", n4)
	}
}
