package main

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

// leaseRBAC returns the Role and RoleBinding docs/operator.md documents for
// the Lease, in namespace ns.
func leaseRBAC(t *testing.T, ns string) []byte {
	t.Helper()
	yaml := testenv.DocBlock(t, "docs/operator.md", "### RBAC for the Lease", "yaml")
	return []byte(strings.ReplaceAll(yaml, "fleet-system", ns))
}

// elect runs client-go's leader election on the Lease as controller-runtime
// does (a "leases" lock) with cfg's identity, until it leads; then it steps
// down, releasing the Lease.
func elect(ctx context.Context, cfg *rest.Config, ns string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, operator.LeaseName, cs.CoreV1(), cs.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: "rbac-test"})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	led := make(chan struct{})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{Lock: lock, LeaseDuration: 2 * time.Second,
		RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond, ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(led) }, OnStoppedLeading: func() {}}})
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { defer close(done); le.Run(ctx) }()
	select {
	case <-led:
	case <-ctx.Done():
	}
	leading := ctx.Err() == nil
	cancel()
	<-done
	if !leading {
		return ctx.Err()
	}
	return nil
}

func TestTheDocumentedLeaseRBACIsEnoughToLead(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := fresh("lease-rbac")
	if out, err := srv.Kubectl(ctx, nil, "create", "namespace", ns); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := srv.Kubectl(ctx, leaseRBAC(t, ns), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the documented RBAC: %v: %s", err, out)
	}
	as := func(sa string) *rest.Config {
		cfg := srv.RESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
		return cfg
	}

	t.Run("the operator's service account creates, takes and releases the Lease", func(t *testing.T) {
		ectx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := elect(ectx, as("fleet-operator"), ns); err != nil {
			t.Fatalf("never led: %v", err)
		}
		cs, err := kubernetes.NewForConfig(srv.RESTConfig())
		if err != nil {
			t.Fatal(err)
		}
		var holder string
		if err := testenv.Poll(ctx, 10*time.Second, func() bool {
			l, err := cs.CoordinationV1().Leases(ns).Get(ctx, operator.LeaseName, metav1.GetOptions{})
			if err != nil || l.Spec.HolderIdentity == nil {
				return false
			}
			holder = *l.Spec.HolderIdentity
			return holder == "" // released (an update)
		}); err != nil {
			t.Errorf("the Lease was not released: holder %q", holder)
		}
	})

	t.Run("another service account may not read the Lease", func(t *testing.T) {
		cs, err := kubernetes.NewForConfig(as("someone-else"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = cs.CoordinationV1().Leases(ns).Get(ctx, operator.LeaseName, metav1.GetOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("got %v, want forbidden (is the API server authorizing with RBAC?)", err)
		}
	})
}
