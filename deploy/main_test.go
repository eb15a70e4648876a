package deploy

import (
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// TestMain starts one kube-apiserver for the package, without CRDs: the
// composition installs them (k8s/config).
func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the harness's clients log nothing
	kubeapi.Main(m, kubeapi.Options{})
}
