package dev

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestADataFolderThatGitWouldCommitIsWarnedAbout(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH")
	}
	repo := t.TempDir()
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("/.fleet-dev/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dataDir string
		warned        bool
	}{
		{"a data folder the work tree does not ignore is warned about", filepath.Join(repo, "dev-data"), true},
		{"an ignored data folder is not", filepath.Join(repo, ".fleet-dev"), false},
		{"a data folder outside every work tree is not", t.TempDir(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			warnIfCommittable(context.Background(), tc.dataDir, slog.New(slog.NewTextHandler(&b, nil)))
			if got := strings.Contains(b.String(), "would commit its secrets and device keys"); got != tc.warned {
				t.Errorf("warned = %v, want %v:\n%s", got, tc.warned, b.String())
			}
		})
	}
}
