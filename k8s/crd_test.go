package k8s_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

func TestMain(m *testing.M) {
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"config/crd"}, ManifestDirs: []string{"config/admission"}})
}

const digest = "@sha256:1111111111111111111111111111111111111111111111111111111111111111"

func newClient(t *testing.T) client.Client {
	t.Helper()
	srv := kubeapi.Shared(t)
	s := runtime.NewScheme()
	if err := fleetv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.RESTConfig(), client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func validDeployment(name string) *fleetv1.Deployment {
	return &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: fleetv1.DeploymentSpec{
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
			Rollout:        fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{
				InitContainer: &score.Service{Name: "migrate", Image: "registry.example.com/migrate" + digest, RestartPolicy: "no"},
				Services: []score.Service{{
					Name: "api", Image: "registry.example.com:5000/api:v1.2.3", Ports: []string{"8080:8080", "53:53/udp"},
					Env:           []score.EnvVar{{Name: "MODE", Value: "prod"}},
					SecretEnv:     []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/analysis/db", Key: "password"}},
					Volumes:       []score.Volume{{HostPath: "/var/lib/analysis", ContainerPath: "/data"}},
					RestartPolicy: "unless-stopped", ImagePullSecret: "hub-pull",
				}},
			}},
		},
	}
}

func TestAValidDeploymentIsAccepted(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := validDeployment("valid")
	if err := c.Create(ctx, d); err != nil {
		t.Fatalf("a valid Deployment was refused: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), d) })
}

// TestADeploymentWithMaintenanceWindowsIsAccepted: a switch window, and a
// fetch window with prefetch, both of the TaskRun's window type (ADR 0029).
func TestADeploymentWithMaintenanceWindowsIsAccepted(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := validDeployment("windows")
	d.Spec.Rollout.Prefetch = true
	d.Spec.Rollout.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "23:00", Duration: "3h"}
	d.Spec.Rollout.FetchWindow = &fleetv1.MaintenanceWindow{Start: "01:00", Duration: "1h30m"}
	if err := c.Create(ctx, d); err != nil {
		t.Fatalf("a Deployment with windows was refused: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), d) })
	var got fleetv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(d.Spec.Rollout.MaintenanceWindow, got.Spec.Rollout.MaintenanceWindow); diff != "" {
		t.Errorf("maintenanceWindow stored (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(d.Spec.Rollout.FetchWindow, got.Spec.Rollout.FetchWindow); diff != "" {
		t.Errorf("fetchWindow stored (-want +got):\n%s", diff)
	}
}

func ptr[T any](v T) *T { return &v }

func TestARolloutWithBatchesIsAcceptedAndDefaulted(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := validDeployment("batches")
	d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{
		{Count: ptr[int32](10), SuccessThreshold: 90, Soak: "5m"},
		{Percent: ptr[int32](50), Soak: "1h30m"},
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "b"}}, Soak: "24h"},
		{Count: ptr[int32](1), Soak: "90s"},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatalf("a valid rollout was refused: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), d) })
	var got fleetv1.Deployment
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
		t.Fatal(err)
	}
	r := got.Spec.Rollout
	if r.Approval != fleetv1.RolloutApprovalAutomatic || r.OnFailure != fleetv1.RolloutOnFailureFail {
		t.Errorf("approval %q, onFailure %q; want the defaults Automatic and Fail", r.Approval, r.OnFailure)
	}
	if len(r.Batches) != 4 || r.Batches[0].SuccessThreshold != 90 || r.Batches[1].SuccessThreshold != 100 {
		t.Errorf("batches %+v; want the thresholds 90 and the default 100", r.Batches)
	}
	manual := validDeployment("manual")
	manual.Spec.Rollout.Approval, manual.Spec.Rollout.OnFailure = fleetv1.RolloutApprovalManual, fleetv1.RolloutOnFailurePause
	if err := c.Create(ctx, manual); err != nil {
		t.Fatalf("approval Manual and onFailure Pause were refused: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), manual) })
	rollback := validDeployment("rollback")
	rollback.Spec.Rollout.OnFailure = fleetv1.RolloutOnFailureRollback
	if err := c.Create(ctx, rollback); err != nil {
		t.Fatalf("onFailure Rollback was refused: %v", err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), rollback) })
	for i, mu := range []intstr.IntOrString{intstr.FromInt32(2), intstr.FromString("10%"), intstr.FromString("100%")} {
		b := validDeployment(fmt.Sprintf("budget-%d", i))
		b.Spec.Rollout.DisruptionBudget = &fleetv1.DisruptionBudget{LabelKey: "fleet.example.com/site", MaxUnavailable: mu}
		if err := c.Create(ctx, b); err != nil {
			t.Fatalf("disruption budget %s was refused: %v", mu.String(), err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), b) })
	}
}

func TestInvalidDeploymentsAreRefusedNamingTheField(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name   string
		mutate func(*fleetv1.Deployment)
		want   []string // every string must be in the error
	}{
		{"an init container with ports is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.InitContainer.Ports = []string{"80:80"} },
			[]string{"init_container.ports must be empty"}},
		{"an unknown restart policy is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].RestartPolicy = "sometimes" },
			[]string{"restart_policy", "sometimes", "unless-stopped"}},
		{"a port without a host part is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Ports = []string{"8080"} },
			[]string{"ports[0]", "should match"}},
		{"a port of zero is refused naming it", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Ports = []string{"0:80"} },
			[]string{`host port 0 of "0:80" is outside 1..65535`, "use host:container"}},
		{"a port above 65535 is refused naming it", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Ports = []string{"80:80", "8080:70000/udp"} },
			[]string{`container port 70000 of "8080:70000/udp" is outside 1..65535`}},
		{"one host port published twice in a service is refused naming the fix", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Ports = []string{"8080:80", "8080:81"} },
			[]string{"services[].ports: a host port is published twice with one protocol", "publish each host port once per protocol"}},
		{"one host port published by two services is refused", func(d *fleetv1.Deployment) {
			d.Spec.Score.Data.Services = append(d.Spec.Score.Data.Services, score.Service{Name: "web", Image: "web:v1", Ports: []string{"8080:80/tcp"}})
		}, []string{"a host port is published twice"}},
		{"32 services of 64 ports each are refused by the total, within the CEL cost budget", func(d *fleetv1.Deployment) {
			d.Spec.Score.Data.Services = nil
			for i := range 32 {
				svc := score.Service{Name: fmt.Sprintf("s%d", i), Image: "s:v1"}
				for j := range 64 {
					svc.Ports = append(svc.Ports, fmt.Sprintf("%d:80", 1+i*64+j))
				}
				d.Spec.Score.Data.Services = append(d.Spec.Score.Data.Services, svc)
			}
		}, []string{"services[].ports: the services publish more than 256 ports in all: use at most 256"}},
		{"a container name with a space is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Name = "my api" },
			[]string{"services[0].name", "should match"}},
		{"two services with the same name are refused", func(d *fleetv1.Deployment) {
			d.Spec.Score.Data.Services = append(d.Spec.Score.Data.Services, d.Spec.Score.Data.Services[0])
		}, []string{"services[].name must be unique"}},
		{"an init container named like a service is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.InitContainer.Name = "api" },
			[]string{"init_container.name must differ"}},
		{"a relative host path is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Volumes[0].HostPath = "var/lib" },
			[]string{"volumes[0].host_path", "should match '^/'"}},
		{"a relative container path is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Volumes[0].ContainerPath = "data" },
			[]string{"volumes[0].container_path"}},
		{"an env name starting with a digit is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Env[0].Name = "1MODE" },
			[]string{"env[0].name"}},
		{"a secret env without a key is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].SecretEnv[0].Key = "" },
			[]string{"secret_env[0].key"}},
		{"an image without a tag or digest is refused naming the value", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com:5000/api" },
			[]string{`image "registry.example.com:5000/api" has no tag or digest`, "must name a digest (repo@sha256:<64 hex>) or an explicit tag (repo:tag)"}},
		{"an image with a short digest is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "api@sha256:abc" },
			[]string{`image "api@sha256:abc"`, "must name a digest"}},
		{"an image with spaces and capitals says what is wrong with it", func(d *fleetv1.Deployment) {
			d.Spec.Score.Data.Services[0].Image = "localhost/Fleet Examples/x::v1"
		}, []string{`image "localhost/Fleet Examples/x::v1"`, "contains a space", "repository must be lowercase", `empty part ("::")`}},
		{"a long bad image is echoed cut to 100 characters", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = strings.Repeat("a b", 60) },
			[]string{`image "` + strings.Repeat("a b", 33) + `a…" contains a space`}},
		{"a score type other than PodmanV0 is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Type = "Helm" },
			[]string{"score.type", "Helm", "PodmanV0"}},
		{"a rollout strategy other than Immediate is refused", func(d *fleetv1.Deployment) { d.Spec.Rollout.Strategy = "Canary" },
			[]string{"rollout.strategy", "Immediate"}},
		{"a rollout batch with both count and percent is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](1), Percent: ptr[int32](10)}}
		}, []string{"rollout.batches[]: set exactly one of count, percent and selector"}},
		{"a rollout batch with none of count, percent and selector is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{SuccessThreshold: 90}}
		}, []string{"rollout.batches[]: set exactly one of count, percent and selector"}},
		{"a rollout batch of count 0 is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](0)}}
		}, []string{"spec.rollout.batches[0].count", "greater than or equal to 1"}},
		{"a rollout batch of 101 percent is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Percent: ptr[int32](101)}}
		}, []string{"spec.rollout.batches[0].percent", "less than or equal to 100"}},
		{"a rollout batch whose selector names no label is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Selector: &fleetv1.TargetSelector{}}}
		}, []string{"rollout.batches[].selector.matchLabels must name at least one label: use count or percent"}},
		{"a success threshold above 100 is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](1), SuccessThreshold: 101}}
		}, []string{"spec.rollout.batches[0].successThreshold", "less than or equal to 100"}},
		{"a soak longer than 24h is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](1), Soak: "24h1s"}}
		}, []string{"rollout.batches[].soak must be hours, minutes and seconds up to 24h, e.g. 90s, 5m or 1h30m"}},
		{"a soak without a unit is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](1), Soak: "300"}}
		}, []string{"rollout.batches[].soak must be hours, minutes and seconds"}},
		{"a soak in days is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](1), Soak: "1d"}}
		}, []string{"rollout.batches[].soak must be hours, minutes and seconds"}},
		{"more than 32 rollout batches are refused", func(d *fleetv1.Deployment) {
			for range 33 {
				d.Spec.Rollout.Batches = append(d.Spec.Rollout.Batches, fleetv1.RolloutBatch{Count: ptr[int32](1)})
			}
		}, []string{"spec.rollout.batches", "must have at most 32 items"}},
		{"an approval other than Automatic or Manual is refused", func(d *fleetv1.Deployment) { d.Spec.Rollout.Approval = "Auto" },
			[]string{"spec.rollout.approval", "Automatic", "Manual"}},
		{"an onFailure other than Fail, Pause or Rollback is refused", func(d *fleetv1.Deployment) { d.Spec.Rollout.OnFailure = "Retry" },
			[]string{"spec.rollout.onFailure", `"Retry"`, `supported values: "Fail", "Pause", "Rollback"`}},
		{"a disruption budget of 0 is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.DisruptionBudget = &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(0)}
		}, []string{"rollout.disruptionBudget.maxUnavailable must be a count of at least 1 or a percentage from 1% to 100%"}},
		{"a disruption budget of 150% is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.DisruptionBudget = &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromString("150%")}
		}, []string{"rollout.disruptionBudget.maxUnavailable must be a count"}},
		{"a disruption budget that is neither a count nor a percentage is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.DisruptionBudget = &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromString("two")}
		}, []string{"rollout.disruptionBudget.maxUnavailable must be a count"}},
		{"a disruption budget on a label key that is no label key is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.DisruptionBudget = &fleetv1.DisruptionBudget{LabelKey: "a b", MaxUnavailable: intstr.FromInt32(1)}
		}, []string{"spec.rollout.disruptionBudget.labelKey"}},
		{"a rollout maintenance window start that is not HH:MM is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "2:00", Duration: "2h"}
		}, []string{"spec.rollout.maintenanceWindow.start"}},
		{"a rollout maintenance window longer than a day is refused with the TaskRun's rule", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "25h"}
		}, []string{"spec.rollout.maintenanceWindow.duration", "maintenanceWindow.duration must be hours and minutes from 1m to 24h"}},
		{"a fetch window in seconds is refused", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.Prefetch = true
			d.Spec.Rollout.FetchWindow = &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "30s"}
		}, []string{"spec.rollout.fetchWindow.duration", "from 1m to 24h"}},
		{"a fetch window without prefetch is refused naming the fix", func(d *fleetv1.Deployment) {
			d.Spec.Rollout.FetchWindow = &fleetv1.MaintenanceWindow{Start: "01:00", Duration: "1h"}
		}, []string{"rollout.fetchWindow needs rollout.prefetch: true", "set prefetch, or remove fetchWindow"}},
		{"a score without services is refused", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services = nil },
			[]string{"services"}},
		{"a name with a dot is refused", func(d *fleetv1.Deployment) { d.Name = "analysis.api" },
			[]string{"metadata.name must be a DNS label"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d := validDeployment("invalid")
			tc.mutate(d)
			err := c.Create(ctx, d)
			if err == nil {
				_ = c.Delete(ctx, d)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "budget") {
				t.Errorf("a rule ran out of its CEL cost budget instead of naming the field:\n%v", err)
			}
		})
	}
}

func TestKubectl(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(stdin string, args ...string) string {
		t.Helper()
		var in []byte
		if stdin != "" {
			in = []byte(stdin)
		}
		out, err := srv.Kubectl(ctx, in, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if _, err := srv.Kubectl(ctx, nil, "create", "namespace", "lab"); err != nil {
		t.Fatal(err)
	}
	t.Run("the product description's example applies", func(t *testing.T) {
		out := run("", "apply", "-n", "lab", "-f", "../examples/analysis-api.yaml")
		if !strings.Contains(out, "deployment.fleet.nationtech.io/analysis-api created") {
			t.Errorf("apply said: %s", out)
		}
	})
	t.Run("the short name lists fleet Deployments with the printer columns", func(t *testing.T) {
		out := run("", "get", "fdeploy", "-n", "lab")
		for _, col := range []string{"PHASE", "TARGETS", "SUCCEEDED", "FAILED", "REVISION", "AGE", "analysis-api"} {
			if !strings.Contains(out, col) {
				t.Errorf("output lacks %q:\n%s", col, out)
			}
		}
	})
	t.Run("kubectl get deployments keeps meaning apps/v1", func(t *testing.T) {
		out := run("", "get", "deployments", "-n", "lab", "-o", "name")
		if strings.Contains(out, "analysis-api") {
			t.Errorf("kubectl get deployments listed the fleet Deployment:\n%s", out)
		}
	})
	t.Run("the fleet category lists every fleet resource", func(t *testing.T) {
		if out := run("", "get", "fleet", "-n", "lab", "-o", "name"); !strings.Contains(out, "deployment.fleet.nationtech.io/analysis-api") {
			t.Errorf("got %s", out)
		}
	})
	t.Run("kubectl explain documents the fields", func(t *testing.T) {
		out := run("", "explain", "fdeploy.spec.score.data.init_container.restart_policy")
		if !strings.Contains(strings.Join(strings.Fields(out), " "), "always overridden") {
			t.Errorf("explain said: %s", out)
		}
	})
	t.Run("devices and taskruns have short names", func(t *testing.T) {
		run("", "get", "fdev", "-n", "lab")
		run("", "get", "ftr", "-n", "lab")
	})
}
