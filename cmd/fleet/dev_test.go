package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/dev"
)

// TestFleetDevHelpShowsEachFlagWithItsType: `fleet dev --help` renders
// every flag as "-name type" (flag's PrintDefaults takes a back-quoted
// word of the usage text for the value's name, which turned
// -kube-bin-dir's into a command line).
func TestFleetDevHelpShowsEachFlagWithItsType(t *testing.T) {
	var o dev.Options
	fs, _ := devFlags(&o)
	var b strings.Builder
	fs.SetOutput(&b)
	fs.PrintDefaults()
	flagLine := regexp.MustCompile(`^  -([a-z-]+( (string|int|duration))?|[a-z]\t.*)$`)
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(l, "  -") && !flagLine.MatchString(l) {
			t.Errorf("fleet dev --help renders a flag as %q, want \"-name type\"", l)
		}
	}
	for _, want := range []string{"  -kube-bin-dir string\n", "  -nats-cli string\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("fleet dev --help lacks %q:\n%s", want, b.String())
		}
	}
}
