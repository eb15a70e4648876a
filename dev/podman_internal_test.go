package dev

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPodmanSocketCandidates(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	repoSock := "unix://" + filepath.Join(root, ".cache", "run", "podman.sock")
	for _, tc := range []struct {
		name, xdg, flag string
		want            []string
	}{
		{"a flag is the only candidate, as a path", "/run/user/1000", "/tmp/p.sock", []string{"unix:///tmp/p.sock"}},
		{"a flag is the only candidate, as a URI", "", "unix:///tmp/p.sock", []string{"unix:///tmp/p.sock"}},
		{"without a flag the user's socket comes before the repository's", "/run/user/1000", "",
			[]string{"unix:///run/user/1000/podman/podman.sock", repoSock}},
		{"without XDG_RUNTIME_DIR only the repository's", "", "", []string{repoSock}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", tc.xdg)
			if diff := cmp.Diff(tc.want, podmanCandidates(tc.flag)); diff != "" {
				t.Errorf("candidates (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExampleImagesAreTheExamplesImages(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var all string
	// typo-image.yaml names an image nobody builds: that is its point.
	for _, f := range []string{"analysis-api.yaml", "canary.yaml", "crashloop.yaml"} {
		b, err := readFile(filepath.Join(root, "examples", f))
		if err != nil {
			t.Fatal(err)
		}
		all += b
	}
	for _, im := range ExampleImages {
		if !strings.Contains(all, "image: "+im.Ref+"\n") {
			t.Errorf("no example uses %s", im.Ref)
		}
	}
	for _, l := range strings.Split(all, "\n") {
		if ref, ok := strings.CutPrefix(strings.TrimSpace(l), "image: "); ok && !hasImage(ref) {
			t.Errorf("an example uses %s, which fleet dev does not build", ref)
		}
	}
}

func hasImage(ref string) bool {
	for _, im := range ExampleImages {
		if im.Ref == ref {
			return true
		}
	}
	return false
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}
