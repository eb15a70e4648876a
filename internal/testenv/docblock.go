package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// DocBlock returns the first fenced code block of language lang (e.g.
// "yaml") after the heading line heading (e.g. "### RBAC for the Lease")
// in doc, a path relative to the repository root such as
// "docs/operator.md": what tests apply or compare, so that a documented
// manifest cannot drift from the one that works. A missing heading or
// block fails tb.
func DocBlock(tb testing.TB, doc, heading, lang string) string {
	tb.Helper()
	root, err := RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		tb.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), heading)
	if !ok {
		tb.Fatalf("%s has no heading %q", doc, heading)
	}
	_, after, ok = strings.Cut(after, "```"+lang+"\n")
	block, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		tb.Fatalf("%s has no %s block after %q", doc, lang, heading)
	}
	return block
}
