package hygiene

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Tags are the build tags every build and test uses (see Taskfile.yml).
const tags = "remote exclude_graphdriver_btrfs containers_image_openpgp"

const module = "github.com/nationtech/harmony-fleet"

type pkg struct {
	ImportPath string
	Name       string
	Doc        string
	Deps       []string
}

func list(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-tags", tags, "-json"}, args...)...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestEveryPackageHasADocComment(t *testing.T) {
	for _, p := range list(t, "./...") {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("package %s has no package doc comment: add one that says what it owns and who may import it", p.ImportPath)
		}
	}
}

func TestImportRules(t *testing.T) {
	tests := []struct {
		name      string
		pkg       string
		forbidden []string // import path prefixes
		allowed   []string // in-repo prefixes that are allowed despite a forbidden prefix
	}{
		{"events imports no in-repo package", module + "/events", []string{module + "/"}, []string{module + "/events"}},
		// The agent, the CI shipper and the CRD test share it.
		{"the score package imports no in-repo package and no Kubernetes", module + "/score",
			[]string{module + "/", "k8s.io/", "sigs.k8s.io/"}, []string{module + "/score"}},
		// sigs.k8s.io/yaml is a YAML library the Podman bindings link
		// (pkg/trust); it is not Kubernetes.
		{"the agent never links Kubernetes or the operator", module + "/agent/...",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/operator", module + "/k8s"}, []string{"sigs.k8s.io/yaml"}},
		{"the agent binary never links Kubernetes or the operator", module + "/cmd/fleet-agent",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/operator", module + "/k8s"}, []string{"sigs.k8s.io/yaml"}},
		{"the auth callout never links Kubernetes, the agent or the operator", module + "/authcallout",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/operator", module + "/agent", module + "/k8s"}, nil},
		{"the auth callout binary never links Kubernetes, the agent or the operator", module + "/cmd/fleet-authcallout",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/operator", module + "/agent", module + "/k8s"}, nil},
		{"the updater binary never links Kubernetes or the operator", module + "/cmd/fleet-updater",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/operator"}, nil},
		{"projections never import the operator or the agent", module + "/projections",
			[]string{module + "/operator", module + "/agent", module + "/authcallout"}, nil},
		// Every projection reader (the operator's runners, the dashboard's
		// read models) links the runner: it reads streams, nothing more.
		{"the projection runner imports only events of the module and no Kubernetes", module + "/projections/runner",
			[]string{module + "/", "k8s.io/", "sigs.k8s.io/"}, []string{module + "/events"}},
		// score comes in with k8s/api, whose Deployment embeds its types.
		{"history reads the streams through events and projections only", module + "/history",
			[]string{module + "/", "sigs.k8s.io/controller-runtime", "k8s.io/client-go"}, []string{module + "/events", module + "/projections", module + "/k8s/api/", module + "/score"}},
		// The dashboard's read models: caches and streams, never the
		// operator's internals or the agent. (k8s/api embeds score's types.)
		{"the dashboard's read models import only k8s/api, score, events, projections and history of the module", module + "/dashboard/fleetview",
			[]string{module + "/"}, []string{module + "/events", module + "/projections", module + "/history", module + "/k8s/api/", module + "/score"}},
		// The dashboard's web surface runs in the operator's binary with the
		// operator's identities, but never links its controllers, the agent
		// or the development provider.
		{"the dashboard never links the operator, the agent or the development provider", module + "/dashboard",
			[]string{module + "/operator", module + "/agent", module + "/identity/devop", module + "/internal/", module + "/controlplane", module + "/dev"}, nil},
		// fleet logs and the dashboard read device logs through it.
		{"device logs (devicelogs) never link the operator, the agent or the test harnesses", module + "/devicelogs",
			[]string{module + "/operator", module + "/agent", module + "/internal/", module + "/dev", module + "/controlplane"}, nil},
		// The agent imports the credential.
		{"the device credential never links Kubernetes, the operator or the development provider", module + "/identity/credential",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/operator", module + "/k8s", module + "/identity/devop"}, nil},
		// An application's deployment program links the SDK. (The NATS
		// client comes in through identity/credential, which serves devices
		// too.)
		{"the harmony SDK links neither the control plane, the agent nor the container runtime bindings", module + "/harmony",
			[]string{module + "/operator", module + "/agent", module + "/authcallout", module + "/projections", module + "/events",
				module + "/internal/", module + "/controlplane", module + "/dev", "github.com/containers/podman/", "sigs.k8s.io/controller-runtime"}, nil},
		// Agent tests use the Podman harness; the Podman bindings link
		// sigs.k8s.io/yaml (pkg/bindings/images → pkg/trust).
		{"the Podman test harness links no Kubernetes code, so agent tests may use it", module + "/internal/testenv/podmantest",
			[]string{"k8s.io/", "sigs.k8s.io/", module + "/internal/testenv/kubeapi"}, []string{"sigs.k8s.io/yaml"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := list(t, "-deps", tc.pkg)
			for _, p := range pkgs {
				if p.ImportPath == tc.pkg || strings.HasPrefix(p.ImportPath, strings.TrimSuffix(tc.pkg, "/...")+"/") {
					continue
				}
				for _, f := range tc.forbidden {
					if under(p.ImportPath, f) && !hasPrefix(p.ImportPath, tc.allowed) {
						t.Errorf("%s links %s (forbidden: %s)", tc.pkg, p.ImportPath, f)
					}
				}
			}
		})
	}
}

// TestWhoMayLinkWhat checks, for every package of the module and so for
// every binary under cmd/, which packages may link (import directly or
// through others) the test harnesses, fleet dev and the parts of the
// one-machine control plane. Tests are not packages here: any test may
// import any of them. A linker ending in "/..." stands for the package and
// the packages under it.
func TestWhoMayLinkWhat(t *testing.T) {
	tests := []struct {
		name    string
		pkg     string
		linkers []string // the only packages whose dependencies may include pkg
	}{
		{"fleet dev (package dev) is linked only by cmd/fleet", "dev", []string{"cmd/fleet"}},
		{"the one-machine control plane (controlplane) is linked only by fleet dev, the scale benchmark and the tests' callout chain",
			"controlplane", []string{"dev", "cmd/fleet", "bench", "cmd/fleet-scale", "internal/callouttest"}},
		{"the embedded NATS server (controlplane/natsembed) is linked only by the one-machine control plane, fleet dev, the scale benchmark and the NATS test harnesses",
			"controlplane/natsembed", []string{"controlplane", "dev", "cmd/fleet", "bench", "cmd/fleet-scale", "internal/natstest", "internal/callouttest"}},
		// fleet token's diagnosis (identity/tokencheck) names the
		// development audience in a hint; it runs in cmd/fleet only.
		{"the development OpenID Provider (identity/devop) is linked only by the one-machine control plane, fleet dev, the scale benchmark, the tests' callout chain and fleet token's diagnosis",
			"identity/devop", []string{"controlplane", "dev", "cmd/fleet", "bench", "cmd/fleet-scale", "internal/callouttest", "identity/tokencheck"}},
		{"fleet token's diagnosis (identity/tokencheck) is linked only by cmd/fleet", "identity/tokencheck", []string{"cmd/fleet"}},
		{"the OpenBao stand-in (dev/baostandin) is linked only by fleet dev", "dev/baostandin", []string{"dev", "cmd/fleet"}},
		{"enrollment (enroll) is linked only by cmd/fleet and fleet dev", "enroll", []string{"cmd/fleet", "dev"}},
		{"the web dashboard (dashboard) is linked only by fleet-operator serve-web and fleet dev", "dashboard",
			[]string{"cmd/fleet-operator", "dev", "cmd/fleet"}},
		{"the local API server starter (dev/kubelocal) is linked only by fleet dev and the API server harness",
			"dev/kubelocal", []string{"dev", "cmd/fleet", "internal/testenv/kubeapi"}},
		{"the scale benchmark (bench) is linked only by its command", "bench", []string{"cmd/fleet-scale"}},
		{"the missing-component policy (internal/testenv) is linked only by the test harnesses", "internal/testenv",
			[]string{"internal/testenv/kubeapi", "internal/testenv/podmantest", "internal/testenv/debianroot", "internal/testenv/browser", "internal/callouttest"}},
		{"the API server harness (internal/testenv/kubeapi) is linked by no package, only tests", "internal/testenv/kubeapi", nil},
		{"the Podman harness (internal/testenv/podmantest) is linked only by the Debian root harness, and tests", "internal/testenv/podmantest",
			[]string{"internal/testenv/debianroot"}},
		{"the Debian root harness (internal/testenv/debianroot) is linked by no package, only tests", "internal/testenv/debianroot", nil},
		{"the browser harness (internal/testenv/browser) is linked by no package, only tests", "internal/testenv/browser", nil},
		{"the NATS test harness (internal/natstest) is linked by no package, only tests", "internal/natstest", nil},
		{"the NATS cluster harness (internal/natscluster) is linked only by the chaos run, the scale benchmark, and tests", "internal/natscluster", []string{"internal/chaos/...", "bench", "cmd/fleet-scale"}},
		{"the auth chain harness (internal/callouttest) is linked by no package, only tests", "internal/callouttest", nil},
		{"the hostile payloads (internal/poisontest) are linked by no package, only tests", "internal/poisontest", nil},
		{"the runtime conformance suite (agent/runtime/runtimetest) is linked by no package, only tests", "agent/runtime/runtimetest", nil},
	}
	pkgs := list(t, "./...")
	exists := map[string]bool{}
	for _, p := range pkgs {
		exists[p.ImportPath] = true
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			restricted := module + "/" + tc.pkg
			if !exists[restricted] {
				t.Fatalf("%s is not a package of the module: the rule would check nothing", restricted)
			}
			for _, p := range pkgs {
				if slices.Contains(p.Deps, restricted) && !mayLink(strings.TrimPrefix(p.ImportPath, module+"/"), tc.linkers) {
					t.Errorf("%s links %s (only %v may)", p.ImportPath, restricted, tc.linkers)
				}
			}
		})
	}
}

// operatorRoles are the rooms of the operator (docs/architecture.md,
// Package layout), each with the other roles it may link and why. Package
// operator is their composition root: it wires them, and no role links it.
var operatorRoles = []struct {
	pkg   string
	may   []string // other roles this one may link
	other string   // why, when may is not empty
}{
	{"operator/policysync", nil, ""},
	{"operator/taskruns", nil, ""},
	{"operator/devices", nil, ""},
	{"operator/deployments", []string{"operator/policysync"}, "a revision waits for the PullSecretPolicy condition (policysync.Ready)"},
	{"operator/rolloutactions", nil, ""},
	{"operator/rollouts", nil, ""},
	{"operator/followers", nil, ""},
	{"operator/exposureindex", nil, ""},
}

// TestOperatorRolesLinkNeitherTheRootNorEachOther keeps the dependency
// direction of the operator: the root (package operator) imports its roles;
// a role links the operator's shared packages (operator/internal/...) but
// never the root, and another role only where the table says why.
func TestOperatorRolesLinkNeitherTheRootNorEachOther(t *testing.T) {
	for _, r := range operatorRoles {
		t.Run(r.pkg, func(t *testing.T) {
			self := module + "/" + r.pkg
			for _, p := range list(t, "-deps", self) {
				path := strings.TrimPrefix(p.ImportPath, module+"/")
				if p.ImportPath == self || strings.HasPrefix(path, r.pkg+"/") || strings.HasPrefix(path, "operator/internal/") {
					continue
				}
				if path != "operator" && !strings.HasPrefix(path, "operator/") {
					continue
				}
				if path == "operator" {
					t.Errorf("%s links the operator's root (package operator): the root wires the roles, not the other way", r.pkg)
					continue
				}
				if !slices.Contains(r.may, path) {
					t.Errorf("%s links %s, another role of the operator: add it to operatorRoles with the reason, or move the shared part to operator/internal", r.pkg, path)
				}
			}
		})
	}
	// Every package under operator/ is a role, a shared package or a
	// role's own sub-package: a new room is added to the table.
	for _, p := range list(t, "./operator/...") {
		path := strings.TrimPrefix(p.ImportPath, module+"/")
		if path == "operator" || strings.HasPrefix(path, "operator/internal/") {
			continue
		}
		known := false
		for _, r := range operatorRoles {
			known = known || path == r.pkg || strings.HasPrefix(path, r.pkg+"/")
		}
		if !known {
			t.Errorf("%s is a package of the operator that operatorRoles does not name", path)
		}
	}
}

// TestInternalHoldsNoProductCode keeps internal/ to test harnesses and
// helpers (docs/architecture.md, Package layout): no binary lives under it,
// and a binary under cmd/ links from it only the helpers (the repository
// root, /proc, the git work tree check) and, for the scale benchmark, the
// NATS cluster it runs on.
func TestInternalHoldsNoProductCode(t *testing.T) {
	helpers := []string{"internal/repo", "internal/procfs", "internal/gitwork"}
	also := map[string][]string{"cmd/fleet-scale": {"internal/natscluster"}}
	for _, p := range list(t, "./...") {
		path := strings.TrimPrefix(p.ImportPath, module+"/")
		if strings.HasPrefix(path, "internal/") && p.Name == "main" {
			t.Errorf("%s is a command under internal/: put it in cmd/", path)
		}
		if !strings.HasPrefix(path, "cmd/") {
			continue
		}
		for _, d := range p.Deps {
			dep, ok := strings.CutPrefix(d, module+"/")
			if ok && strings.HasPrefix(dep, "internal/") && !slices.Contains(helpers, dep) && !slices.Contains(also[path], dep) {
				t.Errorf("the binary %s links %s: internal/ holds harnesses and helpers (%v), not product code", path, dep, helpers)
			}
		}
	}
}

func mayLink(pkg string, linkers []string) bool {
	for _, l := range linkers {
		if pkg == l || (strings.HasSuffix(l, "/...") && (pkg == strings.TrimSuffix(l, "/...") || strings.HasPrefix(pkg, strings.TrimSuffix(l, "...")))) {
			return true
		}
	}
	return false
}

func TestTheImportRuleCheckCanFail(t *testing.T) {
	// natstest imports events, so a rule forbidding in-repo imports for it
	// must report something; this guards against a check that sees nothing.
	found := false
	for _, p := range list(t, "-deps", module+"/internal/natstest") {
		if p.ImportPath == module+"/events" {
			found = true
		}
	}
	if !found {
		t.Fatal("go list -deps did not report a known dependency; the import rule test would pass vacuously")
	}
	// cmd/fleet runs fleet dev, so its Deps must name dev; this
	// guards TestWhoMayLinkWhat in the same way.
	for _, p := range list(t, module+"/cmd/fleet") {
		if !slices.Contains(p.Deps, module+"/dev") {
			t.Fatal("go list did not report cmd/fleet's dependency on dev; TestWhoMayLinkWhat would pass vacuously")
		}
	}
}

// under reports whether import path s is forbidden prefix f: f ending in
// "/" is a plain prefix; otherwise s is the package f or one under it
// (module/dev forbids dev and dev/..., not devicelogs).
func under(s, f string) bool {
	if strings.HasSuffix(f, "/") {
		return strings.HasPrefix(s, f)
	}
	return s == f || strings.HasPrefix(s, f+"/")
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
