// Package testenv holds the one policy every test that needs a real
// component follows: with CI=true a missing component fails the test; outside
// CI the test is skipped with a message naming the setup step that provides
// the component. Nothing silently skips in CI.
//
// Only tests and the test harnesses (internal/testenv/kubeapi,
// internal/testenv/podmantest, internal/testenv/debianroot,
// internal/testenv/browser, internal/callouttest) import this package
// (internal/hygiene checks).
package testenv

import (
	"os"
	"strconv"
	"testing"
)

// InCI reports whether the tests run under CI (the CI environment variable is
// a true boolean such as "true" or "1").
func InCI() bool {
	v, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && v
}

// Missing reports that a component the test needs is not available. In CI it
// fails the test immediately; elsewhere it skips it. component names what is
// missing, setup names the command that installs or starts it, and err (may
// be nil) says what was observed.
func Missing(tb testing.TB, component, setup string, err error) {
	tb.Helper()
	msg := component + " is not available"
	if err != nil {
		msg += ": " + err.Error()
	}
	msg += "; run `" + setup + "` to provide it"
	if InCI() {
		tb.Fatal(msg + " (CI=true: a missing component fails the run)")
	}
	tb.Skip(msg)
}
