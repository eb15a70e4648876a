package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTheADRIndexListsEveryADR keeps adr/README.md true to the files: a row
// for every ADR with the title of its heading, and no number skipped
// without a row saying it was never written.
func TestTheADRIndexListsEveryADR(t *testing.T) {
	b, err := os.ReadFile("adr/README.md")
	if err != nil {
		t.Fatal(err)
	}
	index := string(b)
	paths, err := filepath.Glob("adr/[0-9][0-9][0-9][0-9]-*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 15 {
		t.Fatalf("found %d ADR files, want at least 15", len(paths))
	}
	files := map[int]bool{}
	highest := 0
	for _, p := range paths {
		base := filepath.Base(p)
		n, _ := strconv.Atoi(base[:4])
		files[n] = true
		highest = max(highest, n)
		adr, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`^# ADR (\d{4}): (.+)\n`).FindStringSubmatch(string(adr))
		if m == nil || m[1] != base[:4] {
			t.Errorf("%s does not start with \"# ADR %s: <title>\"", p, base[:4])
			continue
		}
		if row := fmt.Sprintf("| [%s](%s) | %s |", m[1], base, m[2]); !strings.Contains(index, row) {
			t.Errorf("adr/README.md has no row %q", row)
		}
	}
	for n := 1; n <= highest; n++ {
		if !files[n] && !strings.Contains(index, fmt.Sprintf("| %04d | — | never written", n)) {
			t.Errorf("there is no ADR %04d and adr/README.md does not say why", n)
		}
	}
}
