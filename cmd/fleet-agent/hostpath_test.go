package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

// TestEnsureHostPath runs the agent's host path rule on a real file
// system, the roots and paths inside a temporary folder.
func TestEnsureHostPath(t *testing.T) {
	tests := []struct {
		name    string
		roots   []string // relative to the temporary folder; nil: the default
		prepare []string // folders made first; a name ending in "!" is a file
		path    string   // relative to the temporary folder
		want    string   // empty: accepted and the folder exists; else in the error
	}{
		{"a missing folder under a root is created", []string{"/var/lib/fleet-workloads"}, []string{"/var/lib/fleet-workloads"},
			"/var/lib/fleet-workloads/analysis", ""},
		{"a missing folder deep under a root is created with its parents", []string{"/var/lib/fleet-workloads"}, []string{"/var/lib/fleet-workloads"},
			"/var/lib/fleet-workloads/shop/db/data", ""},
		{"a missing root is created as the root itself", []string{"/var/lib/fleet-workloads"}, nil, "/var/lib/fleet-workloads", ""},
		{"an existing folder outside every root is used as it is", []string{"/var/lib/fleet-workloads"}, []string{"/var/lib/analysis"},
			"/var/lib/analysis", ""},
		{"a missing folder outside every root is refused naming the field and the fix", []string{"/var/lib/fleet-workloads"}, nil,
			"/var/lib/analysis", "volumes[].host_path TMP/var/lib/analysis does not exist, and the agent creates missing host paths only under TMP/var/lib/fleet-workloads (--host-path-root): use a host path under TMP/var/lib/fleet-workloads/, or create the folder on the device owned by the agent's user (install -d -o "},
		{"a path that climbs out of a root is refused", []string{"/var/lib/fleet-workloads"}, []string{"/var/lib/fleet-workloads"},
			"/var/lib/fleet-workloads/../analysis", "does not exist, and the agent creates missing host paths only under"},
		{"a sibling that shares the root's prefix is not under it", []string{"/var/lib/fleet-workloads"}, []string{"/var/lib/fleet-workloads"},
			"/var/lib/fleet-workloads-old/x", "does not exist, and the agent creates missing host paths only under"},
		{"any of several roots will do", []string{"/srv/fleet", "/var/lib/fleet-workloads"}, nil, "/var/lib/fleet-workloads/x", ""},
		{"a file where the folder should be is refused", nil, []string{"/data!"}, "/data", "volumes[].host_path TMP/data exists but is not a folder: bind a folder"},
		{"a folder the agent cannot create is refused naming the cause and the fix", nil, []string{"/data!"}, "/data/x",
			"volumes[].host_path TMP/data/x: the agent (user "},
		{"without a root a missing folder is created wherever the user may", nil, nil, "/var/tmp/fleet-examples/analysis", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			var roots hostPathRoots
			for _, r := range tc.roots {
				if err := roots.Set(tmp + r); err != nil {
					t.Fatal(err)
				}
			}
			for _, p := range tc.prepare {
				if f, ok := strings.CutSuffix(p, "!"); ok {
					if err := os.WriteFile(tmp+f, nil, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.MkdirAll(tmp+p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := roots.ensure(tmp + tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if fi, err := os.Stat(tmp + tc.path); err != nil || !fi.IsDir() {
					t.Fatalf("no folder at %s: %v", tc.path, err)
				}
				return
			}
			if want := strings.ReplaceAll(tc.want, "TMP", tmp); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error with %q", err, want)
			}
			if _, err := os.Stat(tmp + tc.path); err == nil && !slices.Contains(tc.prepare, tc.path+"!") {
				t.Errorf("a refused host path was created")
			}
		})
	}
}

func TestARelativeHostPathRootIsRefusedNamingTheFlag(t *testing.T) {
	err := run(context.Background(), []string{"--device", "d", "--insecure-no-auth", "--host-path-root", "var/lib/x"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `--host-path-root "var/lib/x" is not an absolute path`) {
		t.Errorf("got %v", err)
	}
}

// unitDir is where the systemd unit and its host path drop-in live.
const unitDir = "../../deploy/systemd"

// systemdService is the [Service] section of a unit and its drop-ins, as
// systemd merges them: a later assignment replaces a single setting; list
// settings (ReadWritePaths=, StateDirectory=) add up, and an empty one
// clears the list.
type systemdService struct {
	single map[string]string
	lists  map[string][]string
}

func readService(t *testing.T, files ...string) systemdService {
	t.Helper()
	s := systemdService{single: map[string]string{}, lists: map[string][]string{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		section := ""
		for _, l := range strings.Split(string(b), "\n") {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";") {
				continue
			}
			if strings.HasPrefix(l, "[") {
				section = l
				continue
			}
			k, v, ok := strings.Cut(l, "=")
			if !ok || section != "[Service]" {
				continue
			}
			switch k {
			case "ReadWritePaths", "StateDirectory":
				if v == "" {
					s.lists[k] = nil
				}
				s.lists[k] = append(s.lists[k], strings.Fields(v)...)
			default:
				s.single[k] = v
			}
		}
	}
	return s
}

// writable is every folder the sandbox lets the service write: each
// ReadWritePaths= entry and /var/lib/<name> of each StateDirectory=.
// Entries prefixed '-' (ignore if missing) count too.
func (s systemdService) writable() []string {
	var out []string
	for _, p := range s.lists["ReadWritePaths"] {
		out = append(out, strings.TrimLeft(p, "-+"))
	}
	for _, d := range s.lists["StateDirectory"] {
		out = append(out, "/var/lib/"+d)
	}
	return out
}

// hostPathRootsOf are the --host-path-root values of ExecStart.
func (s systemdService) hostPathRootsOf() []string {
	args := strings.Fields(s.single["ExecStart"])
	var out []string
	for i, a := range args {
		if a == "--host-path-root" && i+1 < len(args) {
			out = append(out, args[i+1])
		}
		if v, ok := strings.CutPrefix(a, "--host-path-root="); ok {
			out = append(out, v)
		}
	}
	return out
}

// TestTheSystemdUnitLetsTheAgentCreateHostPathsUnderItsRoots checks the
// unit's sandbox against the agent's host path rule. systemd is not PID 1
// on the machines Fleet is tested on, so the sandbox is not run: the unit
// and its drop-in are read as systemd merges them, every --host-path-root
// must be writable in the sandbox and made by systemd for the agent's user
// (StateDirectory=), and the product's example host path /var/lib/analysis
// is run through the agent's real rule inside a temporary folder laid out
// as systemd lays out the device at start: refused with the unit alone,
// accepted with the documented drop-in.
func TestTheSystemdUnitLetsTheAgentCreateHostPathsUnderItsRoots(t *testing.T) {
	unit := filepath.Join(unitDir, "fleet-agent.service")
	dropIn := filepath.Join(unitDir, "fleet-agent-host-paths.conf")
	tests := []struct {
		name  string
		files []string
		path  string
		want  string // empty: accepted
	}{
		{"a folder under the unit's root is created", []string{unit}, "/var/lib/fleet-workloads/analysis", ""},
		{"the product's /var/lib/analysis is refused by the unit alone, naming the fix", []string{unit}, "/var/lib/analysis",
			"volumes[].host_path TMP/var/lib/analysis does not exist, and the agent creates missing host paths only under TMP/var/lib/fleet-workloads"},
		{"the product's /var/lib/analysis is accepted with the documented drop-in", []string{unit, dropIn}, "/var/lib/analysis", ""},
		{"a missing folder below the drop-in's folder is refused: it is no root", []string{unit, dropIn}, "/var/lib/analysis/cache",
			"volumes[].host_path TMP/var/lib/analysis/cache does not exist"},
		{"/var/tmp is the agent's own (PrivateTmp) and refused", []string{unit, dropIn}, "/var/tmp/fleet-examples/analysis",
			"does not exist, and the agent creates missing host paths only under"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := readService(t, tc.files...)
			if s.single["ProtectSystem"] != "strict" || s.single["User"] != "fleet-agent" {
				t.Fatalf("the unit no longer runs fleet-agent with ProtectSystem=strict (%q, %q): revisit this test", s.single["ProtectSystem"], s.single["User"])
			}
			roots := s.hostPathRootsOf()
			if len(roots) == 0 {
				t.Fatal("ExecStart names no --host-path-root: under ProtectSystem=strict the agent could create no host path")
			}
			writable := s.writable()
			tmp := t.TempDir()
			var agentRoots hostPathRoots
			for _, r := range roots {
				if !slices.Contains(s.lists["StateDirectory"], strings.TrimPrefix(r, "/var/lib/")) {
					t.Errorf("--host-path-root %s is no StateDirectory=: systemd would not make it for fleet-agent", r)
				}
				if !under(r, writable) {
					t.Errorf("--host-path-root %s is not writable in the sandbox (writable: %s)", r, strings.Join(writable, " "))
				}
				if err := agentRoots.Set(tmp + r); err != nil {
					t.Fatal(err)
				}
			}
			// systemd makes every StateDirectory= at start, owned by User=.
			for _, d := range s.lists["StateDirectory"] {
				if err := os.MkdirAll(filepath.Join(tmp, "/var/lib", d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := agentRoots.ensure(tmp + tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				// What the agent made must be writable in the sandbox too
				// (a folder systemd made is).
				if !under(tc.path, writable) {
					t.Errorf("%s is accepted but not writable in the sandbox", tc.path)
				}
				return
			}
			if want := strings.ReplaceAll(tc.want, "TMP", tmp); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error with %q", err, want)
			}
		})
	}
}

// TestSystemdAcceptsTheUnitAndItsDropIn runs systemd's own unit parser
// (systemd-analyze verify, which needs no running systemd) on the unit and
// the host path drop-in: no unknown or malformed setting.
func TestSystemdAcceptsTheUnitAndItsDropIn(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed")
	}
	b, err := os.ReadFile(filepath.Join(unitDir, "fleet-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	drop, err := os.ReadFile(filepath.Join(unitDir, "fleet-agent-host-paths.conf"))
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's program exists: this test's binary
	// stands in for /usr/local/bin/fleet-agent.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "fleet-agent.service")
	if err := os.WriteFile(unit, bytes.ReplaceAll(b, []byte("/usr/local/bin/fleet-agent"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(unit+".d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(unit+".d", "host-paths.conf"), drop, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestAHostPathOutsideTheRootsFailsPreflightAndChangesNothing runs the rule
// as the binary wires it, in the reconciler's preflight (on the simulated
// engine): the Deployment fails with the field and the fix, and no
// container is created.
func TestAHostPathOutsideTheRootsFailsPreflightAndChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp := t.TempDir()
	roots := hostPathRoots{tmp + "/var/lib/fleet-workloads"}
	rt := sim.New(sim.Options{LocalImages: []string{"reg.example/api:v1"}})
	r := &agent.Reconciler{Runtime: rt, Log: slog.New(slog.DiscardHandler), EnsureHostPath: roots.ensure}
	s := score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
		Name: "api", Image: "reg.example/api:v1",
		Volumes: []score.Volume{{HostPath: tmp + "/var/lib/analysis", ContainerPath: "/data"}},
	}}}}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	err = r.Apply(ctx, events.IntentEntry{Namespace: "lab", Name: "analysis", UID: "u1", Generation: 1, RevisionID: "r", Score: raw})
	var pe *agent.PreflightError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "volumes[].host_path "+tmp+"/var/lib/analysis does not exist, and the agent creates missing host paths only under "+tmp+"/var/lib/fleet-workloads") {
		t.Fatalf("got %v, want a preflight error naming volumes[].host_path and the roots", err)
	}
	if cs, err := rt.List(ctx); err != nil || len(cs) != 0 {
		t.Errorf("preflight failed but the engine has %d containers (%v)", len(cs), err)
	}
	if _, err := os.Stat(tmp + "/var/lib/analysis"); err == nil {
		t.Error("the refused host path was created")
	}
}

// TestTheSystemdUnitGivesTheAgentAStateDirectory: the unit's
// StateDirectory= includes fleet-agent, writable in the sandbox, and the
// $STATE_DIRECTORY systemd sets from it makes --state-dir that folder.
func TestTheSystemdUnitGivesTheAgentAStateDirectory(t *testing.T) {
	s := readService(t, filepath.Join(unitDir, "fleet-agent.service"))
	dirs := s.lists["StateDirectory"]
	if !slices.Contains(dirs, stateDirName) {
		t.Fatalf("StateDirectory= %v has no %s: the agent would keep no state file", dirs, stateDirName)
	}
	var env []string
	for _, d := range dirs {
		env = append(env, "/var/lib/"+d)
	}
	if got := stateDirFromEnv(strings.Join(env, ":")); got != "/var/lib/"+stateDirName {
		t.Errorf("--state-dir from $STATE_DIRECTORY=%s is %q, want /var/lib/%s", strings.Join(env, ":"), got, stateDirName)
	}
	if !under("/var/lib/"+stateDirName, s.writable()) {
		t.Errorf("/var/lib/%s is not writable in the sandbox", stateDirName)
	}
}

func TestTheStateDirectoryComesFromSystemd(t *testing.T) {
	tests := []struct{ name, env, want string }{
		{"no StateDirectory= means no state file", "", ""},
		{"the only folder is the state directory", "/var/lib/x", "/var/lib/x"},
		{"of several, the one named fleet-agent", "/var/lib/fleet-workloads:/var/lib/fleet-agent", "/var/lib/fleet-agent"},
		{"of several others, none", "/var/lib/a:/var/lib/b", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := stateDirFromEnv(tc.env); got != tc.want {
				t.Errorf("stateDirFromEnv(%q) = %q, want %q", tc.env, got, tc.want)
			}
		})
	}
}
