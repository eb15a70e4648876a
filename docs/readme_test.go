package docs

import (
	"os"
	"strings"
	"testing"
)

// TestTheReadmeOpensWithTheTwoCommands keeps the README's first screen: the
// run and test commands as its very first lines, .ci/run running exactly
// the test command, and, before the first section, the getting-started
// guide and one line per user path with its guide.
func TestTheReadmeOpensWithTheTwoCommands(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	const (
		dev  = "go tool -modfile=tools/go.mod task dev "
		test = "go tool -modfile=tools/go.mod task test "
	)
	lines := strings.Split(readme, "\n")
	if len(lines) < 5 || lines[0] != "# Harmony Fleet" || lines[2] != "```sh" || !strings.HasPrefix(lines[3], dev) || !strings.HasPrefix(lines[4], test) {
		t.Errorf("the README does not open with the title and the two commands (%q, %q):\n%s", dev, test, strings.Join(lines[:min(6, len(lines))], "\n"))
	}
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	ciLines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	if last := ciLines[len(ciLines)-1]; last != strings.TrimSpace(test) {
		t.Errorf(".ci/run ends with %q, want the README's test command %q", last, strings.TrimSpace(test))
	}
	top, _, ok := strings.Cut(readme, "\n## ")
	if !ok {
		t.Fatal("the README has no section")
	}
	for _, want := range []string{
		"(docs/getting-started.md)",
		"**kubectl user**", "(docs/rollouts.md)",
		"**nats CLI user**", "(docs/debugging-with-nats.md)",
		"**device operator**", "(docs/devices.md)",
		"**CI shipper**", "(docs/ci.md)",
		"**dashboard user**", "(docs/dashboard.md)",
		"**platform operator**", "(docs/operations.md)",
	} {
		if !strings.Contains(top, want) {
			t.Errorf("the README's first screen (before its first section) does not have %s", want)
		}
	}
}
