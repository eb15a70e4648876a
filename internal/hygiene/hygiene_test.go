package hygiene

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
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
		{"history reads the streams through events and projections only", module + "/history",
			[]string{module + "/", "sigs.k8s.io/controller-runtime", "k8s.io/client-go"}, []string{module + "/events", module + "/projections", module + "/k8s/api/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pkgs := list(t, "-deps", tc.pkg)
			for _, p := range pkgs {
				if p.ImportPath == tc.pkg || strings.HasPrefix(p.ImportPath, strings.TrimSuffix(tc.pkg, "/...")+"/") {
					continue
				}
				for _, f := range tc.forbidden {
					if strings.HasPrefix(p.ImportPath, f) && !hasPrefix(p.ImportPath, tc.allowed) {
						t.Errorf("%s links %s (forbidden: %s)", tc.pkg, p.ImportPath, f)
					}
				}
			}
		})
	}
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
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
