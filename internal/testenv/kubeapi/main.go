package kubeapi

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// shared is the package's server started by Main.
var shared struct {
	mu      sync.Mutex // guards the fields below
	mainRan bool
	srv     *Server
	err     error // why srv is nil (binaries missing)
}

// Main starts one server for the whole test package, runs the tests and
// stops the server; it never returns. Call it from TestMain:
//
//	func TestMain(m *testing.M) {
//		kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"testdata/crds"}})
//	}
//
// and reach the server from a test with Shared(t).
//
// When the binaries are missing and CI=true, Main prints why and which
// command provides them, and exits with status 1 without running any test.
// Outside CI the tests run, and Shared skips each test that needs the server
// with the same message. Any other start failure exits with status 1.
func Main(m *testing.M, opts Options) {
	os.Exit(runMain(m, opts))
}

func runMain(m *testing.M, opts Options) int {
	srv, err := Start(opts)
	shared.mu.Lock()
	shared.mainRan = true
	shared.srv, shared.err = srv, err
	shared.mu.Unlock()
	switch {
	case errors.Is(err, ErrBinariesMissing) && !testenv.InCI():
		// Tests that need the server skip through Shared.
	case errors.Is(err, ErrBinariesMissing):
		fmt.Fprintf(os.Stderr, "%s is not available: %v; run `%s` to provide it (CI=true: a missing component fails the run)\n",
			component, err, SetupCommand)
		return 1
	case err != nil:
		fmt.Fprintf(os.Stderr, "kubeapi.Main: %v\n", err)
		return 1
	}

	code := m.Run()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "kubeapi.Main: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// Shared returns the server Main started for this test package. When the
// binaries are missing it applies the testenv policy (fail in CI, skip
// elsewhere, naming `task setup:k8s`). It fails the test when TestMain does
// not call Main.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	shared.mu.Lock()
	ran, srv, err := shared.mainRan, shared.srv, shared.err
	shared.mu.Unlock()
	switch {
	case !ran:
		tb.Fatal("kubeapi.Shared: TestMain must call kubeapi.Main to start the package's server")
	case srv == nil:
		testenv.Missing(tb, component, SetupCommand, err)
	}
	return srv
}
