package updater_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestTheRootUpdaterLinksOnlyWhatItNeeds keeps the root component small:
// its package and binary link no container engine, no Kubernetes, no NATS
// server and none of the module's packages other than events.
func TestTheRootUpdaterLinksOnlyWhatItNeeds(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/nationtech/harmony-fleet/"
	forbidden := []string{"github.com/containers/", "go.podman.io/", "k8s.io/", "sigs.k8s.io/", "github.com/nats-io/nats-server/"}
	for _, pkg := range []string{module + "updater", module + "cmd/fleet-updater"} {
		t.Run(pkg+" links no forbidden package", func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
			cmd.Dir = root
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list: %v", err)
			}
			for _, dep := range strings.Fields(string(out)) {
				if strings.HasPrefix(dep, module) && dep != module+"events" && dep != module+"updater" && dep != module+"cmd/fleet-updater" {
					t.Errorf("links %s", dep)
				}
				for _, f := range forbidden {
					if strings.HasPrefix(dep, f) {
						t.Errorf("links %s", dep)
					}
				}
			}
		})
	}
}
