package scripts_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheRunFolderIsTheCachesRealPath: .cache is often a link to a cache
// several checkouts share, and the services setup starts (the registry, the
// Podman service) keep using the files their configuration names. Named
// through one checkout's link, they break for everyone once that checkout
// is deleted (a CI clone's setup restarted the shared registry with its
// path to htpasswd; after the clone was removed the registry answered 400
// to every request). RUN has every link resolved, even before .cache/run
// exists.
func TestTheRunFolderIsTheCachesRealPath(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	clone, shared := filepath.Join(base, "clone"), filepath.Join(base, "shared")
	lib, err := os.ReadFile("lib.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Join(clone, "scripts"), shared} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(clone, "scripts", "lib.sh"), lib, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(shared, filepath.Join(clone, ".cache")); err != nil {
		t.Fatal(err)
	}
	for _, made := range []bool{false, true} {
		if made {
			if err := os.Mkdir(filepath.Join(shared, "run"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		stdout, stderr, code := bash(t, nil, `source "$1"; printf '%s\n' "$RUN"`, filepath.Join(clone, "scripts", "lib.sh"))
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if got, want := strings.TrimSpace(stdout), filepath.Join(shared, "run"); got != want {
			t.Errorf("with .cache/run made %v: RUN is %s, want the shared cache's real path %s", made, got, want)
		}
	}
}

// TestARegistryWhoseConfigurationNamesAMissingFileIsNoticed: setup restarts
// a running registry whose configuration file, or a file it names
// (htpasswd, TLS certificate and key), is gone; config_files_missing says
// which, and pid_last_arg finds the configuration a running registry was
// started with.
func TestARegistryWhoseConfigurationNamesAMissingFileIsNoticed(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"htpasswd": "u:x\n", "server.crt": "c", "server.key": "k"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := func(name, htpasswd string) string {
		p := filepath.Join(dir, name)
		body := "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: " + filepath.Join(dir, "data-not-made-yet") +
			"\nhttp:\n  addr: 127.0.0.1:5999\n  tls:\n    certificate: " + filepath.Join(dir, "server.crt") +
			"\n    key: " + filepath.Join(dir, "server.key") + "\nauth:\n  htpasswd:\n    realm: test\n    path: " + htpasswd + "\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := filepath.Join(dir, "deleted-clone", ".cache", "run", "registry", "htpasswd")
	tests := []struct {
		name   string
		config string
		want   string // the file said missing; "" none
	}{
		{"every file is there (the storage root is made on the first push)", config("ok.yml", filepath.Join(dir, "htpasswd")), ""},
		{"the htpasswd file of a deleted checkout", config("gone.yml", gone), gone},
		{"the configuration itself is gone", filepath.Join(dir, "deleted-clone", "config.yml"), filepath.Join(dir, "deleted-clone", "config.yml")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, code := bash(t, nil, `source ./lib.sh; if config_files_missing "$1"; then echo "missing"; else echo "complete"; fi`, tt.config)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			want := "complete\n"
			if tt.want != "" {
				want = tt.want + "\nmissing\n"
			}
			if stdout != want {
				t.Errorf("output %q, want %q", stdout, want)
			}
		})
	}
	t.Run("the configuration of a running registry is its command line's last argument", func(t *testing.T) {
		bin := fakeBin(t, map[string]string{"docker-registry": `trap 'kill $! 2>/dev/null; exit 0' TERM; sleep 60 & wait`})
		pidfile := filepath.Join(t.TempDir(), "registry.pid")
		stdout, stderr, code := bash(t, []string{"PATH=" + bin + ":" + os.Getenv("PATH")},
			`source ./lib.sh
bash "$(command -v docker-registry)" serve "$1" &
echo $! > "$2"
trap 'kill $(cat "$2")' EXIT
wait_for 10 "the fake registry" pid_alive "$2" "docker-registry"
pid_last_arg "$2"`, filepath.Join(dir, "ok.yml"), pidfile)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if got := strings.TrimSpace(stdout); got != filepath.Join(dir, "ok.yml") {
			t.Errorf("pid_last_arg says %q, want %s", got, filepath.Join(dir, "ok.yml"))
		}
	})
}
