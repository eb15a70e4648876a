package docs

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestFleetDevNamesEveryAccount keeps fleet.md's list of the NATS accounts
// fleet dev runs equal to the accounts of security.md's NATS configuration
// (which fleet dev carries byte for byte).
func TestFleetDevNamesEveryAccount(t *testing.T) {
	conf := testenv.DocBlock(t, "docs/security.md", "## NATS configuration", "conf")
	m := regexp.MustCompile(`(?s)\naccounts \{\n(.*?)\n\}\n`).FindStringSubmatch(conf)
	if m == nil {
		t.Fatal("security.md's NATS configuration has no accounts block")
	}
	var want []string
	for _, a := range regexp.MustCompile(`(?m)^  ([A-Z_]+) \{`).FindAllStringSubmatch(m[1], -1) {
		want = append(want, a[1])
	}
	if len(want) < 4 {
		t.Fatalf("found the accounts %v in security.md's NATS configuration, want at least 4: did its layout change?", want)
	}
	b, err := os.ReadFile("fleet.md")
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`\(accounts ([^;]*);`).FindStringSubmatch(string(b))
	if list == nil {
		t.Fatal("fleet.md has no \"(accounts `A`, `B`; …\" list")
	}
	var got []string
	for _, a := range regexp.MustCompile("`([A-Z_]+)`").FindAllStringSubmatch(list[1], -1) {
		got = append(got, a[1])
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("fleet.md names the accounts %v, security.md's NATS configuration has %v", got, want)
	}
}
