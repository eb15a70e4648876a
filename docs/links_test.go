package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile("(?m)^#+ (.*)$")
	fenceRE   = regexp.MustCompile("(?s)```.*?```")
	idRE      = regexp.MustCompile(`<a id="([^"]+)"`)
	notSlugRE = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// slug is a heading's anchor as GitHub makes it: lower case, punctuation
// dropped, spaces made hyphens.
func slug(heading string) string {
	return strings.ReplaceAll(notSlugRE.ReplaceAllString(strings.ToLower(strings.TrimSpace(heading)), ""), " ", "-")
}

// anchors returns the anchors of a Markdown file: its headings' (outside
// code blocks) and its explicit <a id="…">.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(string(b), ""), -1) {
		out[slug(m[1])] = true
	}
	for _, m := range idRE.FindAllStringSubmatch(string(b), -1) {
		out[m[1]] = true
	}
	return out
}

// TestEveryRelativeLinkResolves checks every relative link of the README
// and the docs: the file exists, and a #fragment into a Markdown file names
// one of its headings.
func TestEveryRelativeLinkResolves(t *testing.T) {
	files := []string{"../README.md"}
	for _, g := range []string{"*.md", "adr/*.md"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	cache := map[string]map[string]bool{}
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRE.FindAllStringSubmatch(string(b), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(link, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links %s: %v", f, link, err)
				continue
			}
			checked++
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			if cache[target] == nil {
				cache[target] = anchors(t, target)
			}
			if !cache[target][frag] {
				t.Errorf("%s links %s: %s has no heading with the anchor #%s", f, link, target, frag)
			}
		}
	}
	if checked < 100 {
		t.Errorf("checked %d links, want at least 100: did the link syntax change?", checked)
	}
	if got := slug("4. Devices connect with `tls://` through `nats-devices`"); got != "4-devices-connect-with-tls-through-nats-devices" {
		t.Errorf("slug: %q", got)
	}
}
