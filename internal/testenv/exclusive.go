package testenv

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// PodmanExamples is the Exclusive name of the tests that run the
// repository's examples on the one Podman service of the machine: their
// containers have the same names (example-frontend, …) whatever the
// namespace, so two such tests at once (go test runs packages in parallel)
// refuse each other's containers in preflight.
const PodmanExamples = "podman-examples"

// Exclusive makes tb the only test on this machine holding name until it
// ends, whatever process or package the others run in: it waits for an
// exclusive lock on a file under the checkout's .cache/run and releases it
// at cleanup. It logs how long it waited.
func Exclusive(tb testing.TB, name string) {
	tb.Helper()
	root, err := RepoRoot()
	if err != nil {
		tb.Fatalf("testenv: exclusive %s: %v", name, err)
	}
	dir := filepath.Join(root, ".cache", "run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("testenv: exclusive %s: %v", name, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		tb.Fatalf("testenv: exclusive %s: %v", name, err)
	}
	began := time.Now()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		tb.Fatalf("testenv: exclusive %s: lock: %v", name, err)
	}
	if waited := time.Since(began); waited > time.Second {
		tb.Logf("waited %s for the other tests of %s to end", waited.Round(time.Millisecond), name)
	}
	tb.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
