package dev

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestExampleHostFolderNotesNameAFolderTheRootlessEngineCannotWriteAndTheFix(t *testing.T) {
	root := t.TempDir()
	mine, theirs, deep := filepath.Join(root, "mine"), filepath.Join(root, "theirs"), filepath.Join(root, "deep")
	for _, d := range []string{mine, theirs, filepath.Join(deep, "analysis")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(deep, "analysis", "migrations.log"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// Which paths this user cannot write (root made them, say).
	blocked := map[string]bool{theirs: true, filepath.Join(deep, "analysis", "migrations.log"): true}
	writable := func(p string) bool { return !blocked[p] }
	for _, tc := range []struct {
		name string
		dirs []string
		want []string
	}{
		{"a folder that does not exist yet is no problem (the engine makes it)", []string{filepath.Join(root, "missing")}, nil},
		{"a folder the user can write, and all in it, is no problem", []string{mine}, nil},
		{"a folder the user cannot write is named with the fix", []string{theirs},
			[]string{theirs + " is not writable by you (an earlier run as root?): the rollouts using it fail on the Podman device; run: sudo chown -R \"$USER\" " + theirs}},
		{"a file deep inside names its top folder", []string{mine, deep},
			[]string{deep + " is not writable by you (an earlier run as root?): the rollouts using it fail on the Podman device; run: sudo chown -R \"$USER\" " + deep}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, exampleFolderNotes(tc.dirs, writable)); diff != "" {
				t.Errorf("notes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryExampleHostPathIsUnderAnExampleHostFolder: the folders fleet dev
// checks are the ones the examples mount.
func TestEveryExampleHostPathIsUnderAnExampleHostFolder(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	yamls, _ := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	for _, f := range yamls {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?m)host_path:\s*(\S+)`).FindAllStringSubmatch(string(b), -1) {
			paths = append(paths, m[1])
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "examples", "harmony_apply_deployment", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const exampleData = "([^"]+)"`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("examples/harmony_apply_deployment/main.go has no exampleData constant")
	}
	paths = append(paths, m[1])
	if len(paths) < 2 {
		t.Fatalf("found %d example host paths, want at least 2", len(paths))
	}
	for _, p := range paths {
		ok := false
		for _, d := range ExampleHostFolders {
			ok = ok || p == d || strings.HasPrefix(p, d+"/")
		}
		if !ok {
			t.Errorf("the example host path %s is under none of ExampleHostFolders %v", p, ExampleHostFolders)
		}
	}
}
