package dev_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// The end-to-end tests run the real `fleet` binary, as the README's run
// command does, and use only what it prints.

var (
	buildOnce sync.Once
	binDir    string
	fleetBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// repoRoot is the repository root (the tests run in dev/).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// fleetBinary builds cmd/fleet once per test process.
func fleetBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "fleet-dev-test-bin-"); buildErr != nil {
			return
		}
		// Another user runs it too (the guide as a normal user).
		if buildErr = os.Chmod(binDir, 0o755); buildErr != nil {
			return
		}
		fleetBin = filepath.Join(binDir, "fleet")
		began := time.Now()
		cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-o", fleetBin, "./cmd/fleet")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build ./cmd/fleet: " + err.Error() + "\n" + string(out))
			return
		}
		t.Logf("built fleet in %s", time.Since(began).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return fleetBin
}

// devProc is a running `fleet dev` process and what it printed.
type devProc struct {
	cmd     *exec.Cmd
	dataDir string
	// out is stdout up to and including the usage text; stderr the logs.
	out     string
	stderr  *testenv.SyncBuffer
	done    chan error
	stopped bool
	// exports are the three printed export lines (PATH, kubectl, nats
	// CLI): all a new shell gets besides a system PATH.
	exports string
	in      dev.Info
	kube    []int // etcd and kube-apiserver PIDs
	startup time.Duration
}

var (
	rePATH       = regexp.MustCompile(`(?m)^\s*(export PATH="(\S+):\$PATH")$`)
	reKubeconfig = regexp.MustCompile(`(?m)^\s*(export KUBECONFIG=(\S+))$`)
	reKubectl    = regexp.MustCompile(`(?m)# kubectl of the same version: (\S+)$`)
	reNATS       = regexp.MustCompile(`(?m)^\s*(export NATS_URL=(\S+) NATS_USER=(\S+) NATS_PASSWORD="\$\(cat (\S+)\)")$`)
	reBao        = regexp.MustCompile(`(?m)OpenBao stand-in\s+(\S+)`)
	reBaoToken   = regexp.MustCompile(`(?m)root token in (\S+)$`)
	reMetrics    = regexp.MustCompile(`(?m)^\s*metrics\s+(http://\S+)/\{operator,authcallout,agents\}`)
)

// startDev runs `fleet dev` on dir with free ports, the tests' nats CLI
// (--nats-cli) and the flags given, and returns once it printed its usage
// text.
func startDev(t *testing.T, dir string, flags ...string) *devProc {
	t.Helper()
	return startDevAs(t, nil, nil, dir, flags...)
}

// startDevAs is startDev as the user u (nil: the test's own), in the
// environment env (nil: the test's own).
func startDevAs(t *testing.T, u *osUser, env []string, dir string, flags ...string) *devProc {
	t.Helper()
	bin := fleetBinary(t)
	natsBin := natsCLI(t)
	p := &devProc{dataDir: dir, stderr: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"dev", "--data-dir", dir, "--nats-port", "-1", "--metrics-addr", "127.0.0.1:0", "--nats-cli", natsBin}, flags...)...)
	p.cmd.Dir = repoRoot(t)
	if u != nil {
		p.cmd.SysProcAttr = u.attr()
		p.cmd.SysProcAttr.Setpgid = false // Ctrl-C reaches fleet dev alone, as in a terminal
	}
	p.cmd.Env = env
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if strings.HasPrefix(sc.Text(), "See docs/fleet.md") {
				ready <- b.String()
			}
		}
	})
	go func() {
		wg.Wait() // stdout is read to the end before Wait closes it
		p.done <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if !p.stopped {
			_ = p.cmd.Process.Kill()
			<-p.done
			for _, pid := range p.kube {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	select {
	case p.out = <-ready:
	case err := <-p.done:
		p.stopped = true
		t.Fatalf("fleet dev exited before it was ready: %v\n%s", err, p.stderr.String())
	case <-time.After(3 * time.Minute):
		t.Fatalf("fleet dev not ready after 3 minutes:\n%s", p.stderr.String())
	}
	p.startup = time.Since(began)
	t.Logf("fleet dev %v ready in %s", flags, p.startup.Round(time.Millisecond))
	path, kc, kctl, nm := rePATH.FindStringSubmatch(p.out), reKubeconfig.FindStringSubmatch(p.out),
		reKubectl.FindStringSubmatch(p.out), reNATS.FindStringSubmatch(p.out)
	bao, tok, met := reBao.FindStringSubmatch(p.out), reBaoToken.FindStringSubmatch(p.out), reMetrics.FindStringSubmatch(p.out)
	if path == nil || kc == nil || kctl == nil || nm == nil || bao == nil || tok == nil || met == nil {
		t.Fatalf("fleet dev's output lacks the PATH, kubeconfig, kubectl, nats, OpenBao or metrics lines:\n%s", p.out)
	}
	p.exports = path[1] + "\n" + kc[1] + "\n" + nm[1]
	p.in = dev.Info{BinDir: path[2], Kubeconfig: kc[2], Kubectl: kctl[1], NATSURL: nm[2], AdminUser: nm[3], AdminPasswordFile: nm[4],
		OpenBaoAddr: bao[1], OpenBaoTokenFile: tok[1], Namespace: "lab", NATSCLI: natsBin, MetricsURL: met[1]}
	checkBinDir(t, p, map[string]string{"fleet": bin, "kubectl": p.in.Kubectl, "nats": natsBin})
	p.kube = kubeChildren(p.cmd.Process.Pid)
	if len(p.kube) != 2 {
		t.Errorf("fleet dev runs %d etcd/kube-apiserver children (%v), want 2", len(p.kube), p.kube)
	}
	return p
}

// kubeChildren are the etcd and kube-apiserver processes whose parent is pid.
func kubeChildren(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(s[end+1:])
		if comm := s[open+1 : end]; len(f) > 1 && f[1] == strconv.Itoa(pid) && (comm == "etcd" || comm == "kube-apiserver") {
			out = append(out, child)
		}
	}
	return out
}

// alive reports whether pid runs (a zombie counts as gone).
func alive(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	end := bytes.LastIndexByte(stat, ')')
	return end < 0 || !bytes.HasPrefix(bytes.TrimSpace(stat[end+1:]), []byte("Z"))
}

// stop sends SIGINT, as Ctrl-C does, and checks that fleet dev exits 0
// within 2 minutes, with etcd and kube-apiserver gone and the data folder
// released.
func (p *devProc) stop(t *testing.T) {
	t.Helper()
	if p.stopped {
		return
	}
	p.stopped = true
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("fleet dev exited with %v after SIGINT:\n%s", err, tail(p.stderr.String(), 3000))
		}
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("fleet dev did not exit within 2 minutes of SIGINT:\n%s", tail(p.stderr.String(), 3000))
	}
	if err := testenv.PollErr(context.Background(), 30*time.Second, func() error {
		for _, pid := range p.kube {
			if alive(pid) {
				return fmt.Errorf("process %d (etcd or kube-apiserver) still runs after fleet dev exited", pid)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
		for _, pid := range p.kube {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(filepath.Join(p.dataDir, "run", "owner")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data folder is still claimed after the stop: %v", err)
	}
	if !strings.Contains(p.stderr.String(), "fleet dev stopping") {
		t.Errorf("the logs lack the stop record:\n%s", tail(p.stderr.String(), 3000))
	}
}

// checkBinDir checks that the printed PATH line names <data>/bin and that
// its links point at the binaries the test gave fleet dev: fleet at the
// test-built binary (fleet dev's own executable), kubectl at the printed
// one, nats at --nats-cli.
func checkBinDir(t *testing.T, p *devProc, want map[string]string) {
	t.Helper()
	if dir := filepath.Join(p.dataDir, "bin"); p.in.BinDir != dir {
		t.Errorf("the printed PATH line adds %s, want %s", p.in.BinDir, dir)
	}
	for name, target := range want {
		resolved, err := filepath.EvalSymlinks(target)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(filepath.Join(p.in.BinDir, name)); err != nil || got != resolved {
			t.Errorf("%s/%s links to %q (%v), want %s", p.in.BinDir, name, got, err, resolved)
		}
	}
	// A new shell finds the links first (this machine may have a kubectl of
	// its own on the system PATH).
	out, err := p.script(context.Background(), "command -v fleet kubectl nats")
	if want := strings.Join([]string{filepath.Join(p.in.BinDir, "fleet"), filepath.Join(p.in.BinDir, "kubectl"),
		filepath.Join(p.in.BinDir, "nats")}, "\n") + "\n"; err != nil || out != want {
		t.Errorf("after the printed export lines a new shell finds\n%s(%v), want\n%s", out, err, want)
	}
}

// systemPATH is the PATH of a new user's shell before fleet dev's printed
// export lines: none of fleet, kubectl and the nats CLI is on it.
const systemPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// script runs a shell script after fleet dev's printed export lines, from
// the repository root, as a new user's shell would: PATH is systemPATH and
// KUBECONFIG and NATS_* are unset until the export lines set them, so
// fleet, kubectl and nats are found only through the printed PATH line.
// The second argument, the tests' nats CLI, is not put on PATH: startDev
// gave it to fleet dev (--nats-cli) and checked <data>/bin/nats links to it.
func (p *devProc) script(ctx context.Context, script string) (string, error) {
	home, err := os.MkdirTemp("", "fleet-dev-home-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", p.exports+"\n"+script)
	cmd.Dir = filepath.Dir(mustAbs(".")) // the repository root
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "PATH" && name != "KUBECONFIG" && !strings.HasPrefix(name, "NATS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+systemPATH, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// devRecipe is a documented command block of docs/fleet.md.
type devRecipe struct {
	script string
	expect []string
}

var devRecipeRE = regexp.MustCompile("(?s)<!-- fleet-dev-recipe expect=\"([^\"]*)\" -->\\s*```sh\\n(.*?)```")

// devRecipes are docs/fleet.md's recipes for a running fleet dev.
func devRecipes(t *testing.T) []devRecipe {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []devRecipe
	for _, m := range devRecipeRE.FindAllStringSubmatch(string(b), -1) {
		out = append(out, devRecipe{script: strings.TrimSpace(m[2]), expect: strings.Split(m[1], "|")})
	}
	if len(out) < 2 {
		t.Fatalf("docs/fleet.md has %d fleet-dev-recipe blocks; the marker format changed?", len(out))
	}
	return out
}
