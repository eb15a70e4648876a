package devicelogs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// TestKubeAccessAsksTheAPIServer: a user bound to get devices/log in lab
// may read lab's devices, not another namespace's; a user without the
// binding is refused with a reason naming the permission.
func TestKubeAccessAsksTheAPIServer(t *testing.T) {
	srv, err := kubeapi.Start(kubeapi.Options{})
	if errors.Is(err, kubeapi.ErrBinariesMissing) {
		testenv.Missing(t, "kube-apiserver and etcd", kubeapi.SetupCommand, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "device-log-reader", Namespace: "lab"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{devicelogs.PermissionGroup}, Resources: []string{"devices/log"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "device-log-reader", Namespace: "lab"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "device-log-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "ada"}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) devicelogs.KubeAccess {
		cfg := srv.RESTConfig()
		cfg.Impersonate.UserName = user
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return devicelogs.KubeAccess{Client: c}
	}
	ada, grace := as("ada"), as("grace")
	if u, err := ada.User(ctx); err != nil || u != "ada" {
		t.Fatalf("User = %q, %v; want ada", u, err)
	}
	r := request("podman-1")
	// RBAC sees a new binding shortly after it is created.
	testenv.EventuallyErr(t, "ada may read lab/podman-1's logs", time.Minute, func() error { return ada.Authorize(ctx, r) })
	tests := []struct {
		name   string
		access devicelogs.KubeAccess
		ns     string
		allow  bool
	}{
		{"a user bound in the namespace may read", ada, "lab", true},
		{"the same user may not read another namespace's devices", ada, "prod", false},
		{"a user without the binding may not read", grace, "lab", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := request("podman-1")
			r.Namespace = tc.ns
			err := tc.access.Authorize(ctx, r)
			if tc.allow {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, devicelogs.ErrDenied) || !strings.Contains(err.Error(), "get devices/log") {
				t.Fatalf("Authorize = %v, want ErrDenied naming the permission", err)
			}
		})
	}
}
