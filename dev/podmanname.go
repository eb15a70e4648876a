package dev

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Two fleet dev runs on one machine (two data folders) may drive the same
// Podman engine. Their Podman devices must then have different ids: an
// agent removes the containers labelled with its device id that its intent
// does not name, so two podman-1 agents would remove each other's. A run
// claims its device's name per engine (a file under the user's temporary
// folder naming the run's process and data folder) for as long as it runs.

// podmanDeviceFile, in the data folder, records the name the Podman
// device had on the last run, so a restart keeps it.
const podmanDeviceFile = "podman-device"

// maxPodmanDevices bounds the names tried: podman-1 … podman-<max>.
const maxPodmanDevices = 64

// podmanClaimRoot is where the runs of this user claim Podman device
// names.
func podmanClaimRoot() string {
	return filepath.Join(os.TempDir(), "fleet-dev-"+strconv.Itoa(os.Getuid()), "podman-devices")
}

// claimPodmanDevice names the Podman device of the run on dataDir that
// drives the engine at socket: the name recorded in dataDir by an earlier
// run when no other live run holds it, else the first of PodmanDevice,
// podman-2, … that none holds. root holds the claims (podmanClaimRoot);
// release gives the name back.
func claimPodmanDevice(root, dataDir, socket string) (name string, release func(), err error) {
	sum := sha256.Sum256([]byte(socket))
	dir := filepath.Join(root, hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("fleet dev: claim the Podman device's name: %w", err)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return "", nil, fmt.Errorf("fleet dev: --data-dir: %w", err)
	}
	var candidates []string
	if b, err := os.ReadFile(filepath.Join(dataDir, podmanDeviceFile)); err == nil {
		if n := strings.TrimSpace(string(b)); isPodmanDeviceName(n) {
			candidates = append(candidates, n)
		}
	}
	for i := 1; i <= maxPodmanDevices; i++ {
		candidates = append(candidates, "podman-"+strconv.Itoa(i))
	}
	for _, n := range candidates {
		ok, err := claimName(filepath.Join(dir, n), abs)
		if err != nil {
			return "", nil, err
		}
		if !ok {
			continue
		}
		claim := filepath.Join(dir, n)
		if err := os.WriteFile(filepath.Join(dataDir, podmanDeviceFile), []byte(n+"\n"), 0o600); err != nil {
			_ = os.Remove(claim)
			return "", nil, fmt.Errorf("fleet dev: record the Podman device's name: %w: check that --data-dir is writable", err)
		}
		return n, func() { _ = os.Remove(claim) }, nil
	}
	return "", nil, fmt.Errorf("fleet dev: %d fleet dev runs already drive the Podman engine at %s: stop one (or pass --runtime sim)", maxPodmanDevices, socket)
}

// claimName creates the claim file path for the run on dataDir, after
// removing a claim whose process is gone; false when a live run (another
// process, or this one for another data folder) holds it.
func claimName(path, dataDir string) (bool, error) {
	self := strconv.Itoa(os.Getpid())
	for range 2 {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, werr := f.WriteString(self + "\n" + dataDir + "\n")
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				_ = os.Remove(path)
				return false, fmt.Errorf("fleet dev: claim the Podman device's name: %w", werr)
			}
			return true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, fmt.Errorf("fleet dev: claim the Podman device's name: %w", err)
		}
		b, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("fleet dev: read the Podman device claim %s: %w", path, err)
		}
		pidText, holder, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		pid, perr := strconv.Atoi(pidText)
		if perr == nil && sameProgramAlive(pid) && (pidText != self || holder != dataDir) {
			return false, nil // held by a live run
		}
		// Gone, or this run's own (a restart in one process): take it over.
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("fleet dev: remove the stale Podman device claim %s: %w: remove it by hand", path, err)
		}
	}
	return false, nil
}

// isPodmanDeviceName reports whether n is podman-<1..maxPodmanDevices>.
func isPodmanDeviceName(n string) bool {
	i, err := strconv.Atoi(strings.TrimPrefix(n, "podman-"))
	return strings.HasPrefix(n, "podman-") && err == nil && i >= 1 && i <= maxPodmanDevices
}
