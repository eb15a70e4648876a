package deploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// production is the composition the API server tests apply last: the
// production overlay with both optional components.
var production = overlays[1]

var (
	composeOnce sync.Once
	composeErr  error
)

// compose applies, once per test binary and for real (server-side apply,
// never a dry run), the CRDs of k8s/config, waits until they are
// established, then the single-node overlay, then the production one over
// it (an upgrade of every object), as docs/operations.md's install says.
func compose(t *testing.T) *kubeapi.Server {
	t.Helper()
	srv := kubeapi.Shared(t)
	composeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		steps := [][]string{
			{"apply", "--server-side", "-k", "../k8s/config"},
			{"wait", "--for", "condition=established", "--timeout", "2m", "crd/deployments.fleet.nationtech.io",
				"crd/devices.fleet.nationtech.io", "crd/taskruns.fleet.nationtech.io"},
			{"apply", "--server-side", "-k", overlays[2].kustomization(t)},
			{"apply", "--server-side", "-k", production.kustomization(t)},
		}
		for _, s := range steps {
			began := time.Now()
			out, err := srv.Kubectl(ctx, nil, s...)
			if err != nil {
				composeErr = fmt.Errorf("kubectl %s: %w\n%s", strings.Join(s, " "), err, out)
				return
			}
			t.Logf("kubectl %s %s: %s (%d objects)", s[0], s[len(s)-1], time.Since(began).Round(time.Millisecond), strings.Count(string(out), "\n"))
		}
	})
	if composeErr != nil {
		t.Fatal(composeErr)
	}
	return srv
}

func TestTheCompositionAppliesToTheAPIServer(t *testing.T) {
	srv := compose(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Every object the overlay renders exists, as rendered.
	for _, u := range production.render(t) {
		args := []string{"get", resourceOf(u.GetKind(), u.GetAPIVersion()), u.GetName(), "-o", "name"}
		if u.GetNamespace() != "" {
			args = append(args, "-n", u.GetNamespace())
		}
		if _, err := srv.Kubectl(ctx, nil, args...); err != nil {
			t.Errorf("%s %s was not applied: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for _, c := range []struct{ what, args, want string }{
		{"the production NATS has three nodes", "get statefulset nats -n fleet-system -o jsonpath={.spec.replicas}", "3"},
		{"the operator has two replicas", "get deployment fleet-operator -n fleet-system -o jsonpath={.spec.replicas}", "2"},
		{"the operator provisions R3 streams", "get deployment fleet-operator -n fleet-system -o jsonpath={.spec.template.spec.containers[0].args}", "--replicas=$(FLEET_STREAM_REPLICAS)"},
	} {
		out, err := srv.Kubectl(ctx, nil, strings.Fields(c.args)...)
		if err != nil || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: got %q (%v), want %q in it", c.what, out, err, c.want)
		}
	}
	// Applying again changes nothing and is refused nothing: the upgrade path.
	if out, err := srv.Kubectl(ctx, nil, "apply", "--server-side", "-k", production.kustomization(t)); err != nil {
		t.Fatalf("a second apply failed: %v\n%s", err, out)
	}
}

// resourceOf names a kind of an apiVersion for kubectl get: kind.group,
// or the bare kind in the core group.
func resourceOf(kind, apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return strings.ToLower(kind)
	}
	return strings.ToLower(kind) + "." + g
}

// canI runs `kubectl auth can-i` as a service account of fleet-system.
func canI(ctx context.Context, srv *kubeapi.Server, sa, verb, resource, ns string) (bool, error) {
	res, sub, _ := strings.Cut(resource, "/")
	args := []string{"auth", "can-i", verb, res, "--as", "system:serviceaccount:fleet-system:" + sa}
	if sub != "" {
		args = append(args, "--subresource", sub)
	}
	if ns != "(cluster)" {
		args = append(args, "-n", ns)
	}
	out, err := srv.Kubectl(ctx, nil, args...)
	answer := strings.TrimSpace(string(out))
	var ee *exec.ExitError
	switch {
	case err == nil && answer == "yes":
		return true, nil
	case answer == "no" && (err == nil || errors.As(err, &ee)):
		return false, nil
	default:
		return false, fmt.Errorf("kubectl %s: %q: %v", strings.Join(args, " "), answer, err)
	}
}

func TestTheServiceAccountsCanDoExactlyWhatDocsOperationsSays(t *testing.T) {
	srv := compose(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := srv.Kubectl(ctx, nil, "create", "namespace", "lab"); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
		t.Fatal(err)
	}
	rows := docTable(t, "<!-- rbac-table -->")
	seen := map[string]bool{}
	for _, r := range rows {
		if len(r) != 5 {
			t.Fatalf("docs/operations.md RBAC row %q: want 5 cells (service account, verb, resource, namespace, allowed)", r)
		}
		sa, verb, resource, ns, want := strings.Trim(r[0], "`"), r[1], strings.Trim(r[2], "`"), strings.Trim(r[3], "`"), r[4]
		if want != "yes" && want != "no" {
			t.Fatalf("RBAC row %q: allowed is %q, want yes or no", r, want)
		}
		seen[sa] = true
		got, err := canI(ctx, srv, sa, verb, resource, ns)
		if err != nil {
			t.Fatal(err)
		}
		if got != (want == "yes") {
			t.Errorf("%s %s %s in %s: allowed %v, docs/operations.md says %s", sa, verb, resource, ns, got, want)
		}
	}
	for _, sa := range []string{"fleet-operator", "fleet-authcallout", "fleet-dashboard"} {
		if !seen[sa] {
			t.Errorf("docs/operations.md's RBAC table has no row for %s", sa)
		}
	}
	// The callout needs nothing from Kubernetes: it may exactly what a
	// service account without any binding may (discovery, reviews of
	// itself, what the cluster grants every authenticated identity).
	list := func(sa string) string {
		out, err := srv.Kubectl(ctx, nil, "auth", "can-i", "--list", "-n", "lab", "--as", "system:serviceaccount:fleet-system:"+sa)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if got, want := list("fleet-authcallout"), list("no-such-account"); got != want {
		t.Errorf("fleet-authcallout may more than an account without bindings:\n%s\nwant:\n%s", got, want)
	}
}

// yamlObjects decodes a multi-document YAML text.
func yamlObjects(t *testing.T, text string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatal(err)
		}
		if len(m) > 0 {
			objs = append(objs, m)
		}
	}
}

func TestTheLeaseRBACIsTheOneDocsOperatorPrints(t *testing.T) {
	block := testenv.DocBlock(t, "docs/operator.md", "### RBAC for the Lease", "yaml")
	manifest, err := os.ReadFile("base/operator/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var lease []map[string]any
	for _, o := range yamlObjects(t, string(manifest)) {
		if o["kind"] == "Role" || o["kind"] == "RoleBinding" {
			lease = append(lease, o)
		}
	}
	// The operator's TestTheDocumentedLeaseRBACIsEnoughToLead applies the
	// documented block; the manifests must hold the same objects.
	if want := yamlObjects(t, block); !reflect.DeepEqual(lease, want) {
		t.Errorf("deploy/base/operator/rbac.yaml's Role and RoleBinding differ from docs/operator.md's:\n%v\nwant:\n%v", lease, want)
	}
}
