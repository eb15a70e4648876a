package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// overlay is one composition the tests render and apply: a folder under
// deploy/ and the components added to it.
type overlay struct {
	name       string
	dir        string   // relative to deploy/
	components []string // relative to deploy/
	natsNodes  int
}

// overlays are every overlay as shipped, and production with both optional
// components (the spec's gaps closed).
var overlays = []overlay{
	{name: "production", dir: "overlays/production", natsNodes: 3},
	{name: "production with the group source and the OpenBao token", dir: "overlays/production",
		components: []string{"components/group-source", "components/openbao-admin"}, natsNodes: 3},
	{name: "single-node", dir: "overlays/single-node", natsNodes: 1},
}

// kubectl returns the kubectl that `task setup:k8s` built (kustomize is in
// it).
func kubectl(t *testing.T) string {
	t.Helper()
	dir, err := kubeapi.BinDir()
	if err == nil {
		p := filepath.Join(dir, "kubectl")
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	testenv.Missing(t, "kubectl", kubeapi.SetupCommand, err)
	return ""
}

// kustomization returns the folder to render for o: its own folder, or a
// temporary kustomization that adds the components (paths relative to it,
// as kustomize requires).
func (o overlay) kustomization(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.components) == 0 {
		return dir
	}
	tmp := t.TempDir()
	rel := func(p string) string {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(tmp, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - " + rel(o.dir) + "\ncomponents:\n"
	for _, c := range o.components {
		k += "  - " + rel(c) + "\n"
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return tmp
}

// render runs `kubectl kustomize` on o and decodes every object.
func (o overlay) render(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, kubectl(t), "kustomize", o.kustomization(t))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v: %s", o.dir, err, stderr.String())
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decode the rendered %s: %v", o.dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// podTemplate returns the pod template of a workload, or false.
func podTemplate(t *testing.T, u *unstructured.Unstructured) (corev1.PodTemplateSpec, bool) {
	t.Helper()
	var pt corev1.PodTemplateSpec
	switch u.GetKind() {
	case "Deployment", "StatefulSet", "DaemonSet", "Job":
	default:
		return pt, false
	}
	m, ok, err := unstructured.NestedMap(u.Object, "spec", "template")
	if err != nil || !ok {
		t.Fatalf("%s %s has no pod template: %v", u.GetKind(), u.GetName(), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &pt); err != nil {
		t.Fatalf("%s %s: pod template: %v", u.GetKind(), u.GetName(), err)
	}
	return pt, true
}

var (
	pinnedImage = regexp.MustCompile(`^[^@\s]+(@sha256:[0-9a-f]{64}|:[\w][\w.-]{0,127})$`)
	// secretish names an environment variable that must come from a
	// Secret, never a literal value in the manifests.
	secretish = regexp.MustCompile(`(?i)(password|passwd|secret|token|seed|masterkey|private)`)
)

// checkPod returns what is wrong with a workload's pod template, one line
// per finding.
func checkPod(name string, pt corev1.PodTemplateSpec) []string {
	var bad []string
	ps := pt.Spec.SecurityContext
	podNonRoot := ps != nil && ps.RunAsNonRoot != nil && *ps.RunAsNonRoot
	if ps == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		bad = append(bad, name+": pod securityContext.seccompProfile is not RuntimeDefault")
	}
	for _, c := range append(slices.Clone(pt.Spec.InitContainers), pt.Spec.Containers...) {
		where := name + " container " + c.Name
		if !pinnedImage.MatchString(c.Image) || strings.HasSuffix(c.Image, ":latest") {
			bad = append(bad, where+": image "+c.Image+" is not pinned by a tag (not latest) or a digest")
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
			bad = append(bad, where+": no cpu and memory requests")
		}
		if c.Resources.Limits.Memory().IsZero() {
			bad = append(bad, where+": no memory limit")
		}
		sc := c.SecurityContext
		switch {
		case sc == nil:
			bad = append(bad, where+": no securityContext")
			continue
		case !podNonRoot && (sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot):
			bad = append(bad, where+": runAsNonRoot is not true")
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			bad = append(bad, where+": readOnlyRootFilesystem is not true")
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad = append(bad, where+": allowPrivilegeEscalation is not false")
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			bad = append(bad, where+": capabilities do not drop ALL (or add some)")
		}
		for _, e := range c.Env {
			if secretish.MatchString(e.Name) && e.ValueFrom == nil {
				bad = append(bad, where+": env "+e.Name+" has a literal value; take it from a Secret")
			}
		}
	}
	return bad
}

// secretRefs returns the names of the Secrets a pod template refers to.
func secretRefs(pt corev1.PodTemplateSpec) []string {
	var names []string
	for _, v := range pt.Spec.Volumes {
		if v.Secret != nil {
			names = append(names, v.Secret.SecretName)
		}
	}
	for _, c := range append(slices.Clone(pt.Spec.InitContainers), pt.Spec.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				names = append(names, e.ValueFrom.SecretKeyRef.Name)
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil {
				names = append(names, ef.SecretRef.Name)
			}
		}
	}
	return names
}

// configMapProblems returns the references of a pod template to a
// ConfigMap, or to a key of one, that the rendering does not hold.
func configMapProblems(name string, pt corev1.PodTemplateSpec, maps map[string]map[string]string) []string {
	var bad []string
	for _, v := range pt.Spec.Volumes {
		if v.ConfigMap != nil && maps[v.ConfigMap.Name] == nil {
			bad = append(bad, name+": volume "+v.Name+" names ConfigMap "+v.ConfigMap.Name+", which is not rendered")
		}
	}
	for _, c := range pt.Spec.Containers {
		for _, e := range c.Env {
			if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.ConfigMapKeyRef
			data, ok := maps[ref.Name]
			if _, has := data[ref.Key]; !ok || !has {
				bad = append(bad, name+": env "+e.Name+" takes key "+ref.Key+" of ConfigMap "+ref.Name+", which is not rendered")
			}
		}
	}
	return bad
}

// ingressSecrets returns the TLS Secrets of the Ingresses.
func ingressSecrets(u *unstructured.Unstructured) []string {
	var names []string
	tls, _, _ := unstructured.NestedSlice(u.Object, "spec", "tls")
	for _, e := range tls {
		if m, ok := e.(map[string]any); ok {
			if n, ok := m["secretName"].(string); ok {
				names = append(names, n)
			}
		}
	}
	return names
}

// documentedSecrets returns the Secret names of docs/operations.md's
// Secrets table (the first column, in backquotes).
func documentedSecrets(t *testing.T) []string {
	t.Helper()
	rows := docTable(t, "<!-- secrets-table -->")
	var names []string
	for _, r := range rows {
		names = append(names, strings.Trim(r[0], "`"))
	}
	return names
}

// docTable returns the rows (cells trimmed) of the Markdown table that
// follows marker in docs/operations.md, without its header.
func docTable(t *testing.T, marker string) [][]string {
	t.Helper()
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), marker+"\n")
	if !ok {
		t.Fatalf("docs/operations.md has no %s", marker)
	}
	var rows [][]string
	for i, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 { // header and separator
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("the table after %s in docs/operations.md is empty", marker)
	}
	return rows
}

func TestEveryOverlayRendersObjectsThatPassTheChecks(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			objs := o.render(t)
			kinds := map[string]int{}
			var refs []string
			var bad []string
			maps := map[string]map[string]string{}
			for _, u := range objs {
				if u.GetKind() == "ConfigMap" {
					data, _, _ := unstructured.NestedStringMap(u.Object, "data")
					maps[u.GetName()] = data
				}
			}
			for _, u := range objs {
				kinds[u.GetKind()]++
				if u.GetKind() == "Secret" {
					bad = append(bad, "the manifests carry Secret "+u.GetName()+": Secrets are created by the installer, never committed")
				}
				if u.GetKind() == "Ingress" {
					refs = append(refs, ingressSecrets(u)...)
				}
				if u.GetKind() != "Namespace" && u.GetKind() != "CustomResourceDefinition" && u.GetKind() != "ClusterRole" &&
					u.GetKind() != "ClusterRoleBinding" && u.GetNamespace() != "fleet-system" {
					bad = append(bad, u.GetKind()+" "+u.GetName()+" is in namespace "+u.GetNamespace()+", not fleet-system")
				}
				if pt, ok := podTemplate(t, u); ok {
					bad = append(bad, checkPod(u.GetKind()+" "+u.GetName(), pt)...)
					bad = append(bad, configMapProblems(u.GetKind()+" "+u.GetName(), pt, maps)...)
					refs = append(refs, secretRefs(pt)...)
				}
			}
			for _, b := range bad {
				t.Error(b)
			}
			if kinds["CustomResourceDefinition"] != 3 {
				t.Errorf("%d CRDs rendered, want the 3 of k8s/config", kinds["CustomResourceDefinition"])
			}
			// Every Secret the composition refers to is documented (what
			// it holds and the command that creates it).
			sort.Strings(refs)
			refs = slices.Compact(refs)
			doc := documentedSecrets(t)
			for _, r := range refs {
				if !slices.Contains(doc, r) {
					t.Errorf("Secret %s is referred to but not in docs/operations.md's Secrets table", r)
				}
			}
			replicas := map[string]int64{}
			for _, u := range objs {
				spec, _ := u.Object["spec"].(map[string]any)
				switch n := spec["replicas"].(type) {
				case int64:
					replicas[u.GetKind()+"/"+u.GetName()] = n
				case float64:
					replicas[u.GetKind()+"/"+u.GetName()] = int64(n)
				}
			}
			want := map[string]int64{"StatefulSet/nats": int64(o.natsNodes), "Deployment/fleet-operator": 2, "Deployment/fleet-authcallout": 2}
			for k, n := range want {
				if replicas[k] != n {
					t.Errorf("%s has %d replicas, want %d", k, replicas[k], n)
				}
			}
		})
	}
}

func TestTheNATSCalloutConfigurationIsAuthcalloutsServerConfig(t *testing.T) {
	got, err := os.ReadFile("base/nats/fleet-authcallout.conf")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != authcallout.ServerConfig {
		t.Fatal("deploy/base/nats/fleet-authcallout.conf differs from authcallout.ServerConfig: copy it again " +
			"(the configuration docs/security.md prints and every test runs)")
	}
}

func TestTheCRDKustomizationListsEveryGeneratedCRD(t *testing.T) {
	files, err := filepath.Glob("../k8s/config/crd/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRD files in k8s/config/crd: %v", err)
	}
	k, err := os.ReadFile("../k8s/config/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !strings.Contains(string(k), "  - crd/"+filepath.Base(f)+"\n") {
			t.Errorf("k8s/config/kustomization.yaml does not list crd/%s: the composition would not install it", filepath.Base(f))
		}
	}
}
