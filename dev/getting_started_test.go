package dev_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// gettingStartedBlock is a command block of docs/getting-started.md marked
// for the test: its commands, whether they are lines fleet dev prints (the
// test then runs the printed ones), and the lines its output must contain.
type gettingStartedBlock struct {
	script  string
	printed bool
	expect  []string
}

var gettingStartedRE = regexp.MustCompile("(?s)<!-- getting-started( printed)? expect=\"([^\"]*)\" -->\\s*```sh\\n(.*?)```")

func gettingStartedBlocks(t *testing.T) []gettingStartedBlock {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "getting-started.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []gettingStartedBlock
	for _, m := range gettingStartedRE.FindAllStringSubmatch(string(b), -1) {
		blk := gettingStartedBlock{script: strings.TrimSpace(m[3]), printed: m[1] != ""}
		if m[2] != "" {
			blk.expect = strings.Split(m[2], "|")
		}
		out = append(out, blk)
	}
	if len(out) < 8 {
		t.Fatalf("docs/getting-started.md has %d getting-started blocks; the marker format changed?", len(out))
	}
	return out
}

// printedLine is the line fleet dev printed that a documented line stands
// for: the documented line has the printed one's form (its paths and ports
// those of the documented defaults).
func printedLine(t *testing.T, out, doc string) string {
	t.Helper()
	for _, re := range []*regexp.Regexp{rePATH, reKubeconfig, reNATS, reShipBuild, reShipExport, reShipCmd} {
		// The build line is printed with -ldflags when an address is not
		// the default (another registry on 127.0.0.1:5000, say).
		if re.MatchString(doc) || re.MatchString("  "+doc) {
			m := re.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("fleet dev printed no line of the form of %q:\n%s", doc, out)
			}
			return m[1]
		}
	}
	t.Fatalf("the documented line %q is none of fleet dev's printed export, build or ship lines", doc)
	return ""
}

// TestGettingStartedRunsAsDocumented is docs/getting-started.md: one fleet
// dev (the real binary, a Podman device and 2 simulated ones, in the
// default data folder of a new user's home), then every marked block in
// order, each in a new shell from the repository root that has the system
// PATH, Go and only what the previous blocks exported; each block must
// exit 0 and print its expected lines. Blocks marked printed are lines
// fleet dev prints: the test checks the documented line has the printed
// one's form and runs the printed one. It runs as the test's user, with
// the Podman service of `task setup:podman` (root's, on this machine).
func TestGettingStartedRunsAsDocumented(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	reg, goBin, sock, _ := shipPrerequisites(t)
	runGuide(t, nil, sock, reg, goBin)
}

// TestGettingStartedRunsAsDocumentedAsANormalUser is the same guide run as
// a normal user: fleet dev and every block as that user (the test's own
// when it is not root; else guideUser, which it creates), with that
// user's rootless Podman on $XDG_RUNTIME_DIR/podman/podman.sock, fleet
// dev's default (no --podman-socket), its own home, data folder, Go
// caches and container storage, free ports.
func TestGettingStartedRunsAsDocumentedAsANormalUser(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	reg, goBin, _, _ := shipPrerequisites(t)
	runGuide(t, normalUser(t), "", reg, goBin)
}

// runGuide runs the guide's marked blocks against a fleet dev of its own,
// as the test's user (u nil; fleet dev drives the Podman socket sock) or
// as u (fleet dev drives u's rootless Podman, its default socket).
func runGuide(t *testing.T, u *osUser, sock string, reg podmantest.Registry, goBin string) {
	t.Helper()
	blocks := gettingStartedBlocks(t)

	caches, err := exec.Command(goBin, "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	cache := strings.Fields(string(caches))
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH", name == "KUBECONFIG", name == "HOME", name == dev.ShipKeyVariable, strings.HasPrefix(name, "NATS_"),
			strings.HasPrefix(name, "FLEET_"), strings.HasPrefix(name, "XDG_"), strings.HasPrefix(name, "GO"), name == "CGO_ENABLED",
			name == "USER", name == "LOGNAME":
		default:
			env = append(env, kv)
		}
	}
	// A new user's home: fleet dev's default data folder is
	// ~/.cache/fleet-dev, as the guide's paths say.
	home, stateDir := t.TempDir(), t.TempDir()
	var p *devProc
	if u == nil {
		env = append(env, "PATH="+systemPATH+":"+filepath.Dir(goBin), "HOME="+home, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false",
			"GOCACHE="+cache[0], "GOMODCACHE="+cache[1])
		p = startDev(t, filepath.Join(home, ".cache", "fleet-dev"), "--devices", "2", "--runtime", "podman", "--podman-socket", sock)
	} else {
		// The user's own home: its rootless Podman storage and Go caches
		// are kept between runs; the data folder is new.
		home = u.home
		data := filepath.Join(home, ".cache", "fleet-dev")
		if err := os.RemoveAll(data); err != nil {
			t.Fatal(err)
		}
		u.mkdir(t, filepath.Join(home, ".cache"))
		stateDir = filepath.Join(home, ".cache", "guide-test")
		_ = os.RemoveAll(stateDir)
		u.mkdir(t, stateDir)
		t.Cleanup(func() { os.RemoveAll(stateDir) })
		rootlessPodman(t, u)
		// A machine where root ran the examples: something of root's in
		// their folder, which fleet dev must point out at start.
		rootMade := filepath.Join(dev.ExampleHostFolders[0], "made-by-root")
		if !u.self {
			if err := os.MkdirAll(dev.ExampleHostFolders[0], 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(rootMade, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			_ = os.Chown(rootMade, 0, 0)
		}
		// The user's go reads no one else's module cache: the test's is
		// served to it as a module proxy, offline.
		env = append(env, u.env()...)
		env = append(env, "PATH="+systemPATH+":"+filepath.Dir(goBin), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false", "GOTOOLCHAIN=local",
			"GOCACHE="+filepath.Join(home, ".cache", "go-build"), "GOMODCACHE="+filepath.Join(home, "go", "pkg", "mod"),
			"GOPROXY="+goProxy(t, goBin), "GOSUMDB=off")
		// The registry's credentials: registry.env is root's (mode 0600)
		// on this machine, so they are given as fleet dev's variables.
		devEnv := append(u.env(), dev.RegistryEnvVariables[0]+"="+reg.Addr, dev.RegistryEnvVariables[1]+"="+reg.Username,
			dev.RegistryEnvVariables[2]+"="+reg.Password)
		p = startDevAs(t, u, devEnv, data, "--devices", "2", "--runtime", "podman")
		if want := "unix://" + filepath.Join(u.runtimeDir, "podman", "podman.sock"); !strings.Contains(p.out, "Podman at "+want+" for podman-1") {
			t.Errorf("fleet dev as %s does not drive its rootless Podman socket %s by default:\n%s", u.name, want, p.out)
		}
		if want := dev.ExampleHostFolders[0] + ` is not writable by you (an earlier run as root?): the rollouts using it fail on the Podman device; run: sudo chown -R "$USER" ` + dev.ExampleHostFolders[0]; !u.self && !strings.Contains(p.out, want) {
			t.Errorf("fleet dev as %s does not say %q:\n%s", u.name, want, p.out)
		}
		// Then the user does what it says.
		exampleVolumeFor(t, u)
		_ = os.Remove(rootMade)
	}
	defer p.stop(t)
	// The guide starts fleet dev with --devices 2 and shows its outputs.
	if want := "podman-1 on Podman + 2 simulated in namespace lab"; !strings.Contains(p.out, want) {
		t.Fatalf("fleet dev's output lacks %q:\n%s", want, p.out)
	}
	if strings.Contains(p.out, "Ship as CI would (docs/fleet.md, \"Ship from a laptop as CI would\"): not offered") {
		t.Fatalf("fleet dev offers no ship:\n%s", p.out)
	}

	// What each block exported, for the next ones (not the shell's own
	// variables).
	state := filepath.Join(stateDir, "exported.sh")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if u != nil && !u.self {
		if err := os.Chown(state, int(u.uid), int(u.gid)); err != nil {
			t.Fatal(err)
		}
	}
	save := `export -p | grep -Ev '^declare -x (PWD|OLDPWD|SHLVL|_)(=|$)' > ` + state

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	for i, blk := range blocks {
		script := blk.script
		if blk.printed {
			var lines []string
			for l := range strings.SplitSeq(script, "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					lines = append(lines, printedLine(t, p.out, l))
				}
			}
			script = strings.Join(lines, "\n")
		}
		start := time.Now()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", "source "+state+"\n"+script+"\ncd "+repoRoot(t)+"\n"+save)
		cmd.Dir = repoRoot(t)
		cmd.Env = env
		if u != nil {
			cmd.SysProcAttr = u.attr()
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		t.Logf("block %d (%s):\n%s\n%s", i+1, time.Since(start).Round(time.Millisecond), script, out.String())
		if err != nil {
			t.Fatalf("block %d failed: %v\n%s\nfleet dev's logs:\n%s", i+1, err, out.String(), tail(p.stderr.String(), 4000))
		}
		for _, want := range blk.expect {
			if !strings.Contains(out.String(), want) {
				t.Errorf("block %d's output lacks %q", i+1, want)
			}
		}
	}
}

// exampleVolumeFor makes the volume folders of examples/analysis-api.yaml
// and of the reference program writable by u's rootless containers: on
// this machine the guide also runs as root, whose rootful Podman made the
// folders root's; a rootless container (its root is u) could not write
// them. Root's runs still can once they are u's (docs/getting-started.md
// says so for a user).
func exampleVolumeFor(t *testing.T, u *osUser) {
	t.Helper()
	if u.self {
		return
	}
	for _, d := range []string{"/var/tmp/fleet-examples", "/var/tmp/harmony-example"} {
		if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", u.uid, u.gid), d).CombinedOutput(); err != nil {
			t.Fatalf("chown %s to %s: %v\n%s", d, u.name, err, out)
		}
	}
}
