package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// kubeconfigAs writes a copy of the admin kubeconfig that acts as user
// (the kubeconfig's "as": impersonation by the admin).
func kubeconfigAs(t *testing.T, srv *kubeapi.Server, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(srv.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), user+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFleetRolloutWritesARequestAsTheCaller runs `fleet rollout` against a
// real API server with the shipped admission policy, as a user who may only
// read and patch Deployments.
func TestFleetRolloutWritesARequestAsTheCaller(t *testing.T) {
	srv, err := kubeapi.Start(kubeapi.Options{CRDDirs: []string{"../../k8s/config/crd"}, ManifestDirs: []string{"../../k8s/config/admission"}})
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
	if err := fleetv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := rbacv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// alice may read and patch Deployments, nothing else (a
	// SelfSubjectReview every authenticated user may create).
	for _, o := range []client.Object{
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rollout-requester"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"fleet.nationtech.io"}, Resources: []string{"deployments"}, Verbs: []string{"get", "patch"}}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rollout-requester"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "rollout-requester"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}},
		&fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "analyzer", Namespace: "default"}, Spec: fleetv1.DeploymentSpec{
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1"}}}}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	alice, bob := kubeconfigAs(t, srv, "alice"), kubeconfigAs(t, srv, "bob")
	fleet := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := rolloutCmd(ctx, args, &out, io.Discard)
		return out.String(), err
	}
	current := func() (fleetv1.RolloutAction, *fleetv1.Deployment) {
		t.Helper()
		var d fleetv1.Deployment
		if err := admin.Get(ctx, client.ObjectKey{Namespace: "default", Name: "analyzer"}, &d); err != nil {
			t.Fatal(err)
		}
		a, err := fleetv1.ParseRolloutAction(d.Annotations[fleetv1.AnnotationRolloutAction])
		if err != nil {
			t.Fatalf("the annotation the CLI wrote does not parse: %v", err)
		}
		return a, &d
	}

	// The policy takes effect shortly after it is created: the first
	// requests are retried until the API server enforces it (a forged
	// request by alice naming bob is refused).
	forged := `{"action":"pause","generation":1,"by":"bob","request":"forged"}`
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		_, err := srv.Kubectl(ctx, nil, "annotate", "--overwrite", "--as", "alice", "-n", "default", "deployments.fleet.nationtech.io/analyzer",
			fleetv1.AnnotationRolloutAction+"="+forged)
		return err != nil && strings.Contains(err.Error(), "fleet-rollout-action-by")
	}); err != nil {
		t.Fatalf("the admission policy is not enforced: %v", err)
	}

	var requests []string
	steps := []struct {
		name string
		args []string
		want fleetv1.RolloutAction // Request is checked to be new
	}{
		{"a pause is written with the caller's name and the generation", []string{"pause", "default/analyzer", "--kubeconfig", alice},
			fleetv1.RolloutAction{Action: fleetv1.RolloutActionPause, Generation: 1, By: "alice"}},
		{"a resume is a new request", []string{"resume", "--kubeconfig", alice, "default/analyzer"},
			fleetv1.RolloutAction{Action: fleetv1.RolloutActionResume, Generation: 1, By: "alice"}},
		{"an approval names its batch", []string{"approve", "default/analyzer", "--batch", "2", "--kubeconfig", alice},
			fleetv1.RolloutAction{Action: fleetv1.RolloutActionApprove, Generation: 1, Batch: 2, By: "alice"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			out, err := fleet(s.args...)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := current()
			if got.Request == "" || strings.Contains(strings.Join(requests, " "), got.Request) {
				t.Errorf("request id %q is not new (earlier: %v)", got.Request, requests)
			}
			requests = append(requests, got.Request)
			want := s.want
			want.Request = got.Request
			if got != want {
				t.Errorf("annotation %+v, want %+v", got, want)
			}
			for _, w := range []string{string(s.want.Action), "default/analyzer", "generation 1", "as alice", got.Request} {
				if !strings.Contains(out, w) {
					t.Errorf("output %q does not say %q", out, w)
				}
			}
		})
	}

	t.Run("approve without --batch approves the batch the status says waits", func(t *testing.T) {
		_, d := current()
		orig := d.DeepCopy()
		d.Status.ObservedGeneration = d.Generation
		d.Status.Plan = &fleetv1.PlanStatus{Batch: 2, Batches: 4, AwaitingApproval: 3}
		if err := admin.Status().Patch(ctx, d, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet("approve", "default/analyzer", "--kubeconfig", alice); err != nil {
			t.Fatal(err)
		}
		if got, _ := current(); got.Action != fleetv1.RolloutActionApprove || got.Batch != 3 {
			t.Errorf("annotation %+v, want an approval of batch 3", got)
		}
	})

	t.Run("a request follows the Deployment's current generation", func(t *testing.T) {
		_, d := current()
		orig := d.DeepCopy()
		d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2"
		if err := admin.Patch(ctx, d, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet("pause", "default/analyzer", "--kubeconfig", alice); err != nil {
			t.Fatal(err)
		}
		got, d := current()
		if got.Generation != 2 || d.Generation != 2 {
			t.Errorf("request for generation %d, the Deployment is at %d; want 2", got.Generation, d.Generation)
		}
	})

	refused := []struct {
		name string
		args []string
		want []string
	}{
		{"approve without --batch while the status of the generation names no waiting batch is refused naming the flag", []string{"approve", "default/analyzer", "--kubeconfig", alice},
			[]string{"status.plan.awaitingApproval", "--batch"}},
		{"pause with --batch is refused", []string{"pause", "default/analyzer", "--batch", "1", "--kubeconfig", alice}, []string{"--batch is only for approve"}},
		{"an unknown action is refused", []string{"stop", "default/analyzer"}, []string{`unknown action "stop"`, "pause, resume or approve"}},
		{"a Deployment without a namespace is refused", []string{"pause", "analyzer", "--kubeconfig", alice}, []string{"<namespace>/<name>"}},
		{"two Deployments are refused", []string{"pause", "default/a", "default/b", "--kubeconfig", alice}, []string{"name one Deployment"}},
		{"a Deployment that does not exist is an error naming it", []string{"pause", "default/missing", "--kubeconfig", alice}, []string{"default/missing", "not found"}},
		{"a user who may not patch Deployments is refused by the API server", []string{"pause", "default/analyzer", "--kubeconfig", bob}, []string{"forbidden"}},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			_, err := fleet(r.args...)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range r.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
