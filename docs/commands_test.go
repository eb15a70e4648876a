package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestArchitectureNamesEveryFleetCommand keeps architecture.md's binaries
// table true: its `fleet` row names every command of the fleet binary's
// usage text.
func TestArchitectureNamesEveryFleetCommand(t *testing.T) {
	src, err := os.ReadFile("../cmd/fleet/main.go")
	if err != nil {
		t.Fatal(err)
	}
	_, commands, ok := strings.Cut(string(src), "\ncommands:\n")
	if !ok {
		t.Fatal("cmd/fleet/main.go's usage has no commands: list")
	}
	commands, _, _ = strings.Cut(commands, "`")
	names := regexp.MustCompile(`(?m)^  ([a-z]+) `).FindAllStringSubmatch(commands, -1)
	if len(names) < 5 {
		t.Fatalf("found %d commands in cmd/fleet/main.go's usage, want at least 5: did its layout change?", len(names))
	}
	doc, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `fleet` \\|.*$").FindString(string(doc))
	if row == "" {
		t.Fatal("architecture.md's binaries table has no `fleet` row")
	}
	for _, n := range names {
		if !strings.Contains(row, "`fleet "+n[1]+"`") {
			t.Errorf("architecture.md's `fleet` row does not name `fleet %s`", n[1])
		}
	}
}
