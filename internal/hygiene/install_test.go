package hygiene

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTaskInstallPutsTheFourCommandsInOneFolder runs `task install` into a
// temporary folder, as README and docs/fleet.md tell a new user to, and runs
// what it put there.
func TestTaskInstallPutsTheFourCommandsInOneFolder(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("go", "tool", "-modfile=tools/go.mod", "task", "install", "INSTALL_DIR="+dir)
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("task install: %v\n%s", err, out)
	}
	if want := `export PATH="` + dir + `:$PATH"`; !strings.Contains(string(out), want) {
		t.Errorf("task install does not say how to put the folder on PATH (%q):\n%s", want, out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // in the combined output
	}{
		{"fleet", []string{"help"}, "enroll"},
		{"fleet-agent", []string{"-h"}, "-nats-url"},
		{"harmony", []string{"ship", "-h"}, "-context"},
		{"nats", []string{"--version"}, "0.5.0"},
	} {
		t.Run(tc.name+" is installed and runs", func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if fi, err := os.Stat(path); err != nil || fi.Mode()&0o111 == 0 {
				t.Fatalf("%s: %v (mode %v)", path, err, fi)
			}
			out, _ := exec.Command(path, tc.args...).CombinedOutput() // -h exits non-zero by design
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("%s %v printed no %q:\n%s", tc.name, tc.args, tc.want, out)
			}
		})
	}
}
