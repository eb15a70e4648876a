package kubeapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

func TestMain(m *testing.M) {
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"testdata/crds"}})
}

var widgets = schema.GroupVersionResource{Group: "kubeapi.testenv.nationtech.io", Version: "v1", Resource: "widgets"}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dynamicClient(t *testing.T, srv *kubeapi.Server) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(srv.RESTConfig())
	if err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	return c
}

func newWidget(name string, size int64, color string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeapi.testenv.nationtech.io/v1",
		"kind":       "Widget",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       map[string]any{"size": size, "color": color},
	}}
}

func TestKubectlAndServerReportTheBuiltVersion(t *testing.T) {
	srv := kubeapi.Shared(t)
	out, err := srv.Kubectl(testContext(t), nil, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("kubectl version output %q: %v", out, err)
	}
	got := []string{v.ClientVersion.GitVersion, v.ServerVersion.GitVersion}
	want := []string{kubeapi.KubernetesVersion, kubeapi.KubernetesVersion}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("client and server versions (-want +got):\n%s", diff)
	}
}

func TestACustomResourceCreatedWithKubectlIsReadByClientGo(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx := testContext(t)
	if _, err := srv.Kubectl(ctx, nil, "apply", "-f", "testdata/widget-kubectl.yaml"); err != nil {
		t.Fatal(err)
	}
	got, err := dynamicClient(t, srv).Resource(widgets).Namespace("default").Get(ctx, "made-by-kubectl", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get the widget kubectl created: %v", err)
	}
	if diff := cmp.Diff(map[string]any{"size": int64(3), "color": "blue"}, got.Object["spec"]); diff != "" {
		t.Errorf("spec read by client-go (-want +got):\n%s", diff)
	}
}

func TestACustomResourceCreatedWithClientGoIsReadByKubectl(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx := testContext(t)
	_, err := dynamicClient(t, srv).Resource(widgets).Namespace("default").Create(ctx, newWidget("made-by-client-go", 7, "green"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	out, err := srv.Kubectl(ctx, nil, "get", "widgets.kubeapi.testenv.nationtech.io", "made-by-client-go",
		"-n", "default", "-o", "jsonpath={.spec.size} {.spec.color}")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), "7 green"; got != want {
		t.Errorf("kubectl read spec %q, want %q", got, want)
	}
}

func TestStatusWritesKeepTheGenerationAndSpecWritesBumpIt(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx := testContext(t)
	client := dynamicClient(t, srv).Resource(widgets).Namespace("default")
	obj, err := client.Create(ctx, newWidget("generations", 1, "red"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}

	type observed struct {
		Generation int64
		Size       int64
		Phase      string
	}
	observe := func(u *unstructured.Unstructured) observed {
		size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size")
		phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
		return observed{Generation: u.GetGeneration(), Size: size, Phase: phase}
	}

	steps := []struct {
		name   string
		change func(*unstructured.Unstructured) (*unstructured.Unstructured, error)
		want   observed
	}{
		{
			name: "a status update through the status subresource keeps the generation",
			change: func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
				_ = unstructured.SetNestedField(u.Object, "Ready", "status", "phase")
				return client.UpdateStatus(ctx, u, metav1.UpdateOptions{})
			},
			want: observed{Generation: 1, Size: 1, Phase: "Ready"},
		},
		{
			name: "a status change sent to the main resource is ignored",
			change: func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
				_ = unstructured.SetNestedField(u.Object, "Ignored", "status", "phase")
				return client.Update(ctx, u, metav1.UpdateOptions{})
			},
			want: observed{Generation: 1, Size: 1, Phase: "Ready"},
		},
		{
			name: "a spec update bumps the generation",
			change: func(u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
				_ = unstructured.SetNestedField(u.Object, int64(2), "spec", "size")
				return client.Update(ctx, u, metav1.UpdateOptions{})
			},
			want: observed{Generation: 2, Size: 2, Phase: "Ready"},
		},
		{
			name: "a status patch with kubectl keeps the generation",
			change: func(*unstructured.Unstructured) (*unstructured.Unstructured, error) {
				if _, err := srv.Kubectl(ctx, nil, "patch", "widgets.kubeapi.testenv.nationtech.io", "generations",
					"-n", "default", "--subresource=status", "--type=merge", "-p", `{"status":{"phase":"Done"}}`); err != nil {
					return nil, err
				}
				return client.Get(ctx, "generations", metav1.GetOptions{})
			},
			want: observed{Generation: 2, Size: 2, Phase: "Done"},
		},
	}
	for _, step := range steps {
		written, err := step.change(obj)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, observe(written)); diff != "" {
			t.Errorf("%s: the write's response (-want +got):\n%s", step.name, diff)
		}
		// Read back what is stored, not just the write's response.
		stored, err := client.Get(ctx, "generations", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: get: %v", step.name, err)
		}
		if diff := cmp.Diff(step.want, observe(stored)); diff != "" {
			t.Errorf("%s: stored (-want +got):\n%s", step.name, diff)
		}
		obj = stored
	}
}
