package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEveryDevicesCommandIsARecipe keeps devices.md's claim that
// TestKubectlRecipes runs every recipe on the page: each sh block is marked
// as a kubectl recipe (and so run), but a watch (`-w`), which runs until
// Ctrl-C.
func TestEveryDevicesCommandIsARecipe(t *testing.T) {
	b, err := os.ReadFile("devices.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)(<!-- [^\n]*-->\\s*)?```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	marked := 0
	for _, m := range blocks {
		switch {
		case strings.HasPrefix(m[1], "<!-- kubectl-recipe "):
			marked++
		case strings.HasSuffix(strings.TrimSpace(m[2]), " -w"):
		default:
			t.Errorf("devices.md has a command block that no test runs (mark it <!-- kubectl-recipe expect=\"…\" -->):\n%s", m[2])
		}
	}
	if marked != len(recipes(t, "devices.md", "kubectl-recipe")) || marked < 8 {
		t.Errorf("found %d marked blocks, the recipe reader %d: the marker format changed?", marked, len(recipes(t, "devices.md", "kubectl-recipe")))
	}
}
