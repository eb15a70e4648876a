package harmony_test

import (
	"os/exec"
	"strings"
	"testing"
)

// An application's deployment program links the SDK: it must not drag in
// the control plane, the agent or the container runtime bindings. (The NATS
// client comes in through identity/credential, which serves devices too.)
func TestTheSDKLinksNeitherTheControlPlaneNorTheAgent(t *testing.T) {
	const module = "github.com/nationtech/harmony-fleet/"
	out, err := exec.Command("go", "list", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp",
		"-deps", module+"harmony").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{module + "operator", module + "agent", module + "authcallout", module + "projections",
		module + "events", module + "internal/", "github.com/containers/podman/", "sigs.k8s.io/controller-runtime"}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("harmony links %s", dep)
			}
		}
	}
}
