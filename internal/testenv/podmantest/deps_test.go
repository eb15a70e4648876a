package podmantest_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Agent tests use this package, and the agent must never link Kubernetes.
// The Podman bindings themselves link sigs.k8s.io/yaml (a YAML library,
// through pkg/bindings/images → pkg/trust), which is the only exception.
func TestThePackageLinksNoKubernetesCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp",
		"-deps", "github.com/nationtech/harmony-fleet/internal/testenv/podmantest").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "sigs.k8s.io/yaml" || strings.HasPrefix(dep, "sigs.k8s.io/yaml/") {
			continue
		}
		if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") ||
			strings.HasPrefix(dep, "github.com/nationtech/harmony-fleet/internal/testenv/kubeapi") {
			t.Errorf("podmantest links %s", dep)
		}
	}
}
