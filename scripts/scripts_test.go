package scripts_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// bash runs script with bash -euo pipefail (as the setup scripts run) from
// this folder, with env added and args as $1..., and returns stdout, stderr and the exit code.
func bash(t *testing.T, env []string, script string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"-euo", "pipefail", "-c", script, "bash"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run bash: %v", err)
	}
	return out.String(), errb.String(), code
}

// fakeBin makes a folder of executables named by files' keys with the given
// shell bodies, for PATH.
func fakeBin(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/usr/bin/env bash\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeDpkgQuery answers `dpkg-query -W -f=... PKG...` from a state file of
// "package status" lines (status is dpkg's db:Status-Status), as the real
// one does: a line per known package, and exit 1 with a message for a
// package it has never heard of.
const fakeDpkgQuery = `
state="$FAKE_DPKG_STATE"
rc=0
for a in "$@"; do
	case "$a" in -*) continue ;; esac
	line="$(grep -E "^$a " "$state" 2>/dev/null || true)"
	if [[ -z "$line" ]]; then
		echo "dpkg-query: no packages found matching $a" >&2
		rc=1
		continue
	fi
	while read -r _ st; do printf '%s\n' "$st"; done <<<"$line"
done
exit $rc
`

func TestPackageDetection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state string // package status lines known to the fake dpkg
		pkgs  []string
		want  []string // missing
	}{
		{"a package dpkg has never heard of is missing", "", []string{"podman"}, []string{"podman"}},
		{"an installed package is not missing", "podman installed", []string{"podman"}, nil},
		{"a removed package that kept its configuration files is missing", "podman config-files", []string{"podman"}, []string{"podman"}},
		{"a half-installed package is missing", "podman half-installed", []string{"podman"}, []string{"podman"}},
		{"an unpacked but unconfigured package is missing", "podman unpacked", []string{"podman"}, []string{"podman"}},
		{"a half-configured package is missing", "podman half-configured", []string{"podman"}, []string{"podman"}},
		{"a package known only as not-installed is missing", "podman not-installed", []string{"podman"}, []string{"podman"}},
		{"a package installed for one of two architectures is not missing", "libfoo config-files\nlibfoo installed", []string{"libfoo"}, nil},
		{"only the missing ones of a mixed list are named, in order", "runc installed\ncurl config-files", []string{"podman", "runc", "curl", "buildah"}, []string{"podman", "curl", "buildah"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			if err := os.WriteFile(state, []byte(tc.state+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			bin := fakeBin(t, map[string]string{"dpkg-query": fakeDpkgQuery})
			stdout, stderr, code := bash(t, []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "FAKE_DPKG_STATE=" + state},
				`source ./lib.sh; missing_packages "$@"; echo survived`, tc.pkgs...)
			if code != 0 || !strings.HasSuffix(stdout, "survived\n") {
				t.Fatalf("the detection ended the script (exit %d):\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			got := strings.Fields(strings.TrimSuffix(stdout, "survived\n"))
			if !slices.Equal(got, tc.want) {
				t.Errorf("missing = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestPackageDetectionWithTheRealDpkg asks this machine's dpkg about a
// package it has never heard of and one it has installed (dpkg itself), under
// set -euo pipefail: the old detection ended the script right there.
func TestPackageDetectionWithTheRealDpkg(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		testenv.Missing(t, "dpkg-query (a Debian machine)", "run the tests on Debian 12", err)
	}
	stdout, stderr, code := bash(t, nil, `source ./lib.sh; missing_packages harmony-fleet-no-such-package-zz dpkg; echo survived`)
	if code != 0 || stdout != "harmony-fleet-no-such-package-zz\nsurvived\n" {
		t.Fatalf("exit %d, stdout %q, want the unknown package named and the script alive\nstderr:\n%s", code, stdout, stderr)
	}
}

// runPackageStep runs setup-podman.sh --packages-only against a fake dpkg and a
// fake apt-get whose behaviour aptBody gives; the fake apt-get records every
// call in $FAKE_APT_CALLS and, on a successful install, marks the packages
// installed in the fake dpkg's state.
func runPackageStep(t *testing.T, aptBody string) (stdout, stderr string, code int, calls []string) {
	t.Helper()
	dir := t.TempDir()
	state, callsFile := filepath.Join(dir, "state"), filepath.Join(dir, "calls")
	if err := os.WriteFile(state, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := fakeBin(t, map[string]string{
		"dpkg-query": fakeDpkgQuery,
		"sudo":       `exec "$@"`,
		"dpkg":       `echo "dpkg $*" >> "$FAKE_APT_CALLS"`,
		"apt-get": `echo "$*" >> "$FAKE_APT_CALLS"
n=$(wc -l < "$FAKE_APT_CALLS")
` + aptBody + `
if [[ " $* " == *" install "* ]]; then
	for a in "$@"; do case "$a" in -*|install) ;; *) echo "$a installed" >> "$FAKE_DPKG_STATE" ;; esac; done
fi
exit 0`,
	})
	stdout, stderr, code = bash(t, []string{
		"PATH=" + bin + ":" + os.Getenv("PATH"),
		"FAKE_DPKG_STATE=" + state, "FAKE_APT_CALLS=" + callsFile,
		"APT_LOG=" + filepath.Join(dir, "apt.log"), "POLICY_RC_D=" + filepath.Join(dir, "policy-rc.d"),
		"APT_LOCK_TIMEOUT=60",
	}, `bash ./setup-podman.sh --packages-only`)
	b, _ := os.ReadFile(callsFile)
	calls = strings.Split(strings.TrimSpace(string(b)), "\n")
	if _, err := os.Stat(filepath.Join(dir, "policy-rc.d")); err == nil {
		t.Errorf("the temporary policy-rc.d is still there after the package step")
	}
	return stdout, stderr, code, calls
}

// installCalls are the apt-get calls that install packages.
func installCalls(calls []string) []string {
	var out []string
	for _, c := range calls {
		if strings.Contains(" "+c+" ", " install ") {
			out = append(out, c)
		}
	}
	return out
}

func TestThePackageStepOnAMachineWhereDpkgKnowsNothing(t *testing.T) {
	t.Run("every package is installed and the script goes on", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runPackageStep(t, "")
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		inst := installCalls(calls)
		if len(inst) != 1 {
			t.Fatalf("apt-get install ran %d times, want once: %q", len(inst), calls)
		}
		for _, p := range []string{"podman", "runc", "buildah", "docker-registry", "curl", "slirp4netns"} {
			if !strings.Contains(" "+inst[0]+" ", " "+p+" ") {
				t.Errorf("apt-get install %q lacks %s", inst[0], p)
			}
		}
		for _, opt := range []string{"DPkg::Lock::Timeout=60", "Acquire::Retries=1", "--no-install-recommends", "--force-confold"} {
			if !strings.Contains(inst[0], opt) {
				t.Errorf("apt-get install %q lacks %s", inst[0], opt)
			}
		}
		if !strings.Contains(stdout, "packages only") {
			t.Errorf("stdout lacks the end of the package step:\n%s", stdout)
		}
	})
	t.Run("apt's own error is printed when the install fails, after one retry", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runPackageStep(t, `if [[ " $* " == *" install "* ]]; then echo "E: Unable to locate package podman" >&2; exit 100; fi`)
		if code == 0 {
			t.Fatalf("exit 0 although apt-get install failed\nstdout:\n%s", stdout)
		}
		if !strings.Contains(stderr, "E: Unable to locate package podman") || !strings.Contains(stderr, "could not install") {
			t.Errorf("stderr lacks apt's error or what to do:\n%s", stderr)
		}
		if n := len(installCalls(calls)); n != 2 {
			t.Errorf("apt-get install ran %d times, want 2 (one retry): %q", n, calls)
		}
	})
	t.Run("a lock held by another apt is waited for", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runPackageStep(t, `if (( n == 1 )); then echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2; exit 100; fi`)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if len(calls) < 3 || !strings.HasPrefix(strings.Fields(calls[0])[len(strings.Fields(calls[0]))-1], "update") {
			t.Errorf("calls %q: want the locked update repeated, then the install", calls)
		}
	})
	t.Run("an interrupted dpkg is repaired before the install is tried again", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runPackageStep(t, `if [[ " $* " == *" install "* ]] && ! grep -q "^dpkg --configure -a" "$FAKE_APT_CALLS"; then echo "E: dpkg was interrupted, you must manually run 'dpkg --configure -a' to correct the problem." >&2; exit 100; fi`)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if !slices.Contains(calls, "dpkg --configure -a") {
			t.Errorf("calls %q lack dpkg --configure -a", calls)
		}
	})
}

// TestEveryScriptPassesShellcheck runs shellcheck over every script under
// scripts/ and .ci/.
func TestEveryScriptPassesShellcheck(t *testing.T) {
	sc, err := exec.LookPath("shellcheck")
	if err != nil {
		testenv.Missing(t, "shellcheck", "go tool -modfile=tools/go.mod task setup:lint", err)
	}
	scripts, err := filepath.Glob("*.sh")
	if err != nil {
		t.Fatal(err)
	}
	scripts = append(scripts, filepath.Join("..", ".ci", "run"))
	if len(scripts) < 5 {
		t.Fatalf("found only %q: the layout changed?", scripts)
	}
	cmd := exec.Command(sc, append([]string{"-x"}, scripts...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("shellcheck %s: %v\n%s", strings.Join(scripts, " "), err, out)
	}
}

// runBrowserSetup runs setup-browser.sh with args against a fake dpkg whose
// state is the given lines, a fake apt-get that records its calls and marks
// what it installs, and a fake chromium (chromiumBody; none when empty).
func runBrowserSetup(t *testing.T, state, chromiumBody string, args ...string) (stdout, stderr string, code int, calls []string) {
	t.Helper()
	dir := t.TempDir()
	stateFile, callsFile := filepath.Join(dir, "state"), filepath.Join(dir, "calls")
	if err := os.WriteFile(stateFile, []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"dpkg-query": fakeDpkgQuery,
		"sudo":       `exec "$@"`,
		"apt-get": `echo "$*" >> "$FAKE_APT_CALLS"
if [[ " $* " == *" install "* ]]; then
	for a in "$@"; do case "$a" in -*|install) ;; *) echo "$a installed" >> "$FAKE_DPKG_STATE" ;; esac; done
fi
exit 0`,
	}
	if chromiumBody != "" {
		files["chromium"] = chromiumBody
	}
	bin := fakeBin(t, files)
	// PATH holds the fakes and links to the few real commands the scripts
	// use, never the machine's own folders, which may hold a real chromium.
	for _, c := range []string{"bash", "env", "id", "dirname", "date", "mkdir", "tail", "mktemp", "cat", "rm", "grep", "wc", "sed", "tr", "sleep", "tee", "chmod"} {
		real, err := exec.LookPath(c)
		if err != nil {
			t.Fatalf("%s, which the setup scripts use: %v", c, err)
		}
		if err := os.Symlink(real, filepath.Join(bin, c)); err != nil {
			t.Fatal(err)
		}
	}
	stdout, stderr, code = bash(t, []string{
		"PATH=" + bin,
		"FAKE_DPKG_STATE=" + stateFile, "FAKE_APT_CALLS=" + callsFile,
		"APT_LOG=" + filepath.Join(dir, "apt.log"), "POLICY_RC_D=" + filepath.Join(dir, "policy-rc.d"),
		"APT_LOCK_TIMEOUT=60",
	}, `bash ./setup-browser.sh "$@"`, args...)
	b, _ := os.ReadFile(callsFile)
	if s := strings.TrimSpace(string(b)); s != "" {
		calls = strings.Split(s, "\n")
	}
	return stdout, stderr, code, calls
}

func TestTheBrowserSetup(t *testing.T) {
	const chromium = `echo "Chromium 156.0.8078.114 built on Debian GNU/Linux 12 (bookworm)"`
	t.Run("on a machine where dpkg knows nothing, chromium and a font are installed and chromium is started once", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runBrowserSetup(t, "", chromium)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		inst := installCalls(calls)
		if len(inst) != 1 || !strings.Contains(" "+inst[0]+" ", " chromium ") || !strings.Contains(" "+inst[0]+" ", " fonts-liberation ") ||
			!strings.Contains(inst[0], "--no-install-recommends") {
			t.Errorf("apt-get install calls %q: want one installing chromium and fonts-liberation without recommends", inst)
		}
		if !strings.Contains(stdout, "Chromium 156") {
			t.Errorf("stdout lacks chromium's version:\n%s", stdout)
		}
	})
	t.Run("on a machine that has them nothing is installed", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runBrowserSetup(t, "chromium installed\nfonts-liberation installed\n", chromium)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if len(calls) != 0 {
			t.Errorf("apt-get ran on a machine that has the packages: %q", calls)
		}
	})
	t.Run("--check installs nothing and names what is missing and the task that installs it", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, calls := runBrowserSetup(t, "fonts-liberation installed\n", chromium, "--check")
		if code == 0 {
			t.Fatalf("--check passed on a machine without chromium\nstdout:\n%s", stdout)
		}
		if len(calls) != 0 {
			t.Errorf("--check ran apt-get: %q", calls)
		}
		if !strings.Contains(stderr, "not installed: chromium") || strings.Contains(stderr, "fonts-liberation") || !strings.Contains(stderr, "task setup:browser") {
			t.Errorf("stderr does not name chromium alone and the task:\n%s", stderr)
		}
	})
	t.Run("a chromium that does not start fails the setup with its own error", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code, _ := runBrowserSetup(t, "chromium installed\nfonts-liberation installed\n", `echo "error while loading shared libraries: libnss3.so" >&2; exit 127`)
		if code == 0 {
			t.Fatalf("exit 0 although chromium does not start\nstdout:\n%s", stdout)
		}
		if !strings.Contains(stderr, "does not start") || !strings.Contains(stderr, "libnss3.so") {
			t.Errorf("stderr lacks the failure and chromium's message:\n%s", stderr)
		}
	})
	t.Run("an installed package without chromium on PATH is reported", func(t *testing.T) {
		t.Parallel()
		_, stderr, code, _ := runBrowserSetup(t, "chromium installed\nfonts-liberation installed\n", "")
		if code == 0 || !strings.Contains(stderr, "is not on PATH") {
			t.Errorf("exit %d, stderr:\n%s\nwant a failure saying chromium is not on PATH", code, stderr)
		}
	})
}
