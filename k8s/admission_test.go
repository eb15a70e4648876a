package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// admissionOnce prepares the admission tests once per package run.
var admissionOnce struct {
	sync.Once
	err error
}

// installAdmission lets the users alice and bob read and patch
// Deployments; it returns once the API server enforces the admission
// policy of config/admission, which TestMain installs (a write as alice
// naming bob is refused).
func installAdmission(t *testing.T) {
	t.Helper()
	kubeapi.Shared(t)
	admissionOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		admin := as(t, "")
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rollout-requesters"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"fleet.nationtech.io"}, Resources: []string{"deployments"}, Verbs: []string{"get", "create", "update", "patch", "delete"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rollout-requesters"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
				{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}
		for _, o := range []client.Object{role, binding} {
			if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				admissionOnce.err = err
				return
			}
		}
		probe := validDeployment("admission-probe")
		if err := admin.Create(ctx, probe); err != nil {
			admissionOnce.err = err
			return
		}
		defer func() { _ = admin.Delete(context.Background(), probe) }()
		alice := as(t, "alice")
		admissionOnce.err = testenv.Poll(ctx, time.Minute, func() bool {
			err := annotate(ctx, alice, probe.Name, action("pause", "bob", "probe"))
			return err != nil && strings.Contains(err.Error(), "fleet-rollout-action-by")
		})
	})
	if admissionOnce.err != nil {
		t.Fatalf("install config/admission: %v", admissionOnce.err)
	}
}

// as returns a client that acts as user (impersonated by the admin), or
// as the admin when user is empty, with the Fleet and RBAC types.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := kubeapi.Shared(t).RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	s := runtime.NewScheme()
	if err := fleetv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := rbacv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// action is an annotation value as `kubectl annotate` users write it.
func action(kind, by, request string) string {
	return fmt.Sprintf(`{"action":%q,"generation":1,"by":%q,"request":%q}`, kind, by, request)
}

// annotate sets (value non-empty) or removes the rollout-action annotation
// with a merge patch.
func annotate(ctx context.Context, c client.Client, name, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fleetv1.AnnotationRolloutAction: v}}})
	if err != nil {
		return err
	}
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	return c.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch))
}

func TestTheAdmissionPolicyAcceptsARolloutActionOnlyByItsWriter(t *testing.T) {
	installAdmission(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, alice, bob := newClient(t), as(t, "alice"), as(t, "bob")
	d := validDeployment("admission")
	if err := admin.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), d) })

	refused := []string{"fleet-rollout-action-by"}
	steps := []struct {
		name  string
		write func() error
		want  []string // nil: accepted; otherwise every string is in the refusal
	}{
		{"alice annotating a request by alice is accepted", func() error { return annotate(ctx, alice, d.Name, action("pause", "alice", "r1")) }, nil},
		{"alice annotating a request by bob is refused naming the rule and the fix", func() error {
			return annotate(ctx, alice, d.Name, action("resume", "bob", "r2"))
		}, append(refused, `set "by" to "alice"`)},
		{"a request naming by twice is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":"alice","by":"bob","request":"r3"}`)
		}, append(refused, `"by" exactly once`)},
		{"a request with a backslash escape is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":"\u0061lice","request":"r4"}`)
		}, append(refused, "backslash")},
		{"a request whose by is not a string is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":7,"request":"r5"}`)
		}, refused},
		{"an oversize request is refused naming the limit", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":"alice","request":"`+strings.Repeat("r", 2000)+`"}`)
		}, append(refused, "longer than 1024")},
		{"a request without by is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"request":"r6"}`)
		}, refused},
		{"bob changing a label leaves alice's request and is accepted", func() error {
			return bob.Patch(ctx, &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: "default"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"b"}}}`)))
		}, nil},
		{"bob annotating his own request is accepted", func() error { return annotate(ctx, bob, d.Name, action("resume", "bob", "r7")) }, nil},
		{"alice removing the annotation is accepted", func() error { return annotate(ctx, alice, d.Name, "") }, nil},
		{"alice creating a Deployment with a request by bob is refused", func() error {
			n := validDeployment("admission-created")
			n.Annotations = map[string]string{fleetv1.AnnotationRolloutAction: action("pause", "bob", "r8")}
			err := alice.Create(ctx, n)
			if err == nil {
				_ = admin.Delete(ctx, n)
			}
			return err
		}, append(refused, `set "by" to "alice"`)},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			err := s.write()
			switch {
			case s.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case s.want != nil && err == nil:
				t.Fatal("accepted")
			case s.want != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
				t.Errorf("refused with %v, want an Invalid or Forbidden status", err)
			}
			for _, w := range s.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		})
	}
	var got fleetv1.Deployment
	if err := admin.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[fleetv1.AnnotationRolloutAction]; ok {
		t.Errorf("the annotation is still there: %v", got.Annotations)
	}
}
