package harmony

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/harmony/internal/cisecret"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestDeployRefs(t *testing.T) {
	tests := []struct {
		name    string
		ref     string
		wantErr error  // nil: accepted
		names   string // the error must say this
	}{
		{"a registry digest is accepted", "hub.example/app/web@" + digest, nil, ""},
		{"a tag pinned by a digest is accepted", "hub.example/app/web:v1@" + digest, nil, ""},
		{"a dev tag is accepted", "hub.example:5000/app/web:dev-1234", nil, ""},
		{"a dev tag with nothing after dev- is refused naming the flag and the fix", "hub.example/app/web:dev-", ErrUsage, `--image web=hub.example/app/web:dev-: tag "dev-" names no build: put the build after dev-`},
		{"a dev tag of one character after dev- is accepted", "hub.example/app/web:dev-1", nil, ""},
		{"latest is refused with the fix", "hub.example/app/web:latest", ErrMutableTag, "--image web=hub.example/app/web:latest"},
		{"no tag means latest and is refused", "hub.example/app/web", ErrMutableTag, "dev-* tag"},
		{"a registry port is not taken for a tag", "hub.example:5000/app/web", ErrMutableTag, "no tag"},
		{"a release tag is mutable and refused", "hub.example/app/web:v1.2", ErrMutableTag, "registry digest"},
		{"a short digest is refused", "hub.example/app/web@sha256:abc", ErrUsage, "not a sha256 digest"},
		{"a digest without a repository is refused", "@" + digest, ErrUsage, "not a sha256 digest"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkDeployRef("web", tc.ref)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("got %v, want %v saying %q", err, tc.wantErr, tc.names)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		names string // "" means the command line is valid
	}{
		{"ship with a context and a tag is valid", []string{"ship", "--context", "prod", "--tag", "abc123"}, ""},
		{"deploy with images is valid", []string{"deploy", "--context", "prod", "--tag", "abc", "--image", "web=r/w@" + digest, "--wait"}, ""},
		{"a missing tag names the flag", []string{"ship", "--context", "prod"}, "--tag is required"},
		{"tag latest is refused", []string{"ship", "--context", "prod", "--tag", "latest"}, "--tag latest is mutable"},
		{"a tag with a slash is refused", []string{"ship", "--tag", "a/b"}, "not an image tag"},
		{"ship takes no --image", []string{"ship", "--tag", "a", "--image", "web=x"}, "-image"},
		{"rollback does not exist", []string{"rollback"}, "there is no rollback"},
		{"an image given twice is refused", []string{"deploy", "--tag", "a", "--image", "web=x:dev-1", "--image", "web=y:dev-2"}, "given twice"},
		{"a negative wait timeout is refused", []string{"ship", "--tag", "a", "--wait-timeout", "-1s"}, "--wait-timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			_, err := parse(tc.args, &stderr)
			if tc.names == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error()+stderr.String(), tc.names) {
				t.Fatalf("got %v (stderr %q), want a usage error saying %q", err, stderr.String(), tc.names)
			}
		})
	}
}

type manifest struct {
	images []Image
	d      Deployment
}

func (m manifest) Images() []Image { return m.images }
func (m manifest) Contexts() []Context {
	return []Context{{Name: "prod", Namespace: "shop", Registry: "hub.example:5000", Repository: "shop"}}
}
func (m manifest) Deployment() Deployment { return m.d }

func TestTheDeploymentCarriesThePolicyAndThePinnedImages(t *testing.T) {
	app := manifest{
		images: []Image{{Name: "web", Context: "web"}, {Name: "api", Context: "api", Dockerfile: "api/Containerfile"}},
		d: Deployment{
			Name: "shop", AllowedGroups: []string{"stores"}, Placement: map[string]string{"role": "till"},
			Init: &Service{Name: "migrate", Image: "api", RestartPolicy: "always", Env: []EnvVar{{"ROLE", "migrate"}}},
			Services: []Service{
				{Name: "web", Image: "web", Ports: []string{"8080:80"}, Env: []EnvVar{{"API", "http://api"}}, ImagePullSecret: "shop-pull"},
				{Name: "api", Image: "api", SecretEnv: []SecretEnv{{"DB_PASSWORD", "shop/db", "password"}},
					Volumes: []Volume{{"/var/lib/shop", "/data", true}}, RestartPolicy: "on-failure"},
			},
		},
	}
	if err := validateApp(app); err != nil {
		t.Fatal(err)
	}
	c, err := selectContext(app, "prod")
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{"web": "hub.example:5000/shop/web@" + digest, "api": "hub.example:5000/shop/api@" + digest}
	got := fleetDeployment(app, c, "abc", refs)
	want := &fleetv1.Deployment{Spec: fleetv1.DeploymentSpec{
		AllowedGroups:  []string{"stores"},
		TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "till"}},
		Rollout:        fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate},
		Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{
			InitContainer: &score.Service{Name: "migrate", Image: refs["api"], RestartPolicy: "no", Env: []score.EnvVar{{Name: "ROLE", Value: "migrate"}}},
			Services: []score.Service{
				{Name: "web", Image: refs["web"], Ports: []string{"8080:80"}, RestartPolicy: "unless-stopped",
					Env: []score.EnvVar{{Name: "API", Value: "http://api"}}, ImagePullSecret: "shop-pull"},
				{Name: "api", Image: refs["api"], RestartPolicy: "on-failure",
					SecretEnv: []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "shop/db", Key: "password"}},
					Volumes:   []score.Volume{{HostPath: "/var/lib/shop", ContainerPath: "/data", ReadOnly: true}}},
			},
		}},
	}}
	want.Name, want.Namespace = "shop", "shop"
	want.Labels = map[string]string{LabelManagedBy: "harmony"}
	want.Annotations = map[string]string{AnnotationTag: "abc"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Deployment (-want +got):\n%s", diff)
	}
	if c.OpenBao.RegistryCredentials != "harmony/shop/prod/RegistryCredentials" || c.OpenBao.Kubeconfig != "harmony/shop/prod/kubeconfig" ||
		c.OpenBao.JWTMount != "jwt" || c.OpenBao.KVMount != "secret" {
		t.Errorf("context defaults %+v", c.OpenBao)
	}
	if got := dockerfile(app.images[0]); got != "web/Dockerfile" {
		t.Errorf("default Dockerfile %q", got)
	}
}

func TestAnInconsistentManifestIsRefusedNamingTheField(t *testing.T) {
	good := func() manifest {
		return manifest{images: []Image{{Name: "web", Context: "web"}}, d: Deployment{Name: "shop", Services: []Service{{Name: "web", Image: "web"}}}}
	}
	tests := []struct {
		name   string
		change func(*manifest)
		names  string
	}{
		{"a service naming an undeclared image", func(m *manifest) { m.d.Services[0].Image = "api" }, `Services[0] (web).Image "api"`},
		{"an init container naming an undeclared image", func(m *manifest) { m.d.Init = &Service{Name: "i", Image: "x"} }, "Deployment().Init"},
		{"an image name that is not a DNS label", func(m *manifest) { m.images[0].Name = "Web" }, "Images()[0].Name"},
		{"an image declared twice", func(m *manifest) { m.images = append(m.images, m.images[0]) }, "declared twice"},
		{"an image without a context", func(m *manifest) { m.images[0].Context = "" }, "Context is empty"},
		{"a Deployment without services", func(m *manifest) { m.d.Services = nil }, "Services is empty"},
		{"a Deployment name that is not a DNS label", func(m *manifest) { m.d.Name = "Shop" }, "Deployment().Name"},
		{"an image no service uses names it and the fix", func(m *manifest) { m.images = append(m.images, Image{Name: "worker", Context: "worker"}) },
			"Images()[1] (worker) is used by no service: ship builds and pushes every declared image, so use it in Deployment().Services or Deployment().Init, or remove it from Images()"},
		{"an init container with ports", func(m *manifest) { m.d.Init = &Service{Name: "migrate", Image: "web", Ports: []string{"8080:80"}} },
			"Deployment().Init (migrate).Ports must be empty"},
		{"two services with one name", func(m *manifest) { m.d.Services = append(m.d.Services, Service{Name: "web", Image: "web"}) },
			`Deployment().Services[1].Name "web" is also the name of Deployment().Services[0]`},
		{"an init container named like a service", func(m *manifest) { m.d.Init = &Service{Name: "web", Image: "web"} },
			`Deployment().Services[0].Name "web" is also the name of Deployment().Init`},
		{"a container name Podman refuses", func(m *manifest) { m.d.Services[0].Name = "web server" }, `Deployment().Services[0].Name "web server" is not a container name`},
		{"a port without a host side", func(m *manifest) { m.d.Services[0].Ports = []string{"80"} }, `Deployment().Services[0] (web).Ports[0] "80" is not a port mapping`},
		{"a health check without a command", func(m *manifest) { m.d.Services[0].Healthcheck = &Healthcheck{Interval: time.Second} },
			`Deployment().Services[0] (web).Healthcheck.command`},
		{"a health check interval under a second", func(m *manifest) {
			m.d.Services[0].Healthcheck = &Healthcheck{Command: []string{"true"}, Interval: 500 * time.Millisecond}
		}, `Deployment().Services[0] (web).Healthcheck.interval "500ms"`},
		{"a health check on the init container", func(m *manifest) {
			m.d.Init = &Service{Name: "migrate", Image: "web", Healthcheck: &Healthcheck{Command: []string{"true"}}}
		}, "Deployment().Init (migrate).Healthcheck must be nil"},
		{"a batch with a count and a percentage", func(m *manifest) { m.d.Rollout = &Rollout{Batches: []Batch{{Count: 1, Percent: 10}}} },
			"Deployment().Rollout.Batches[0]: set exactly one of Count, Percent and Selector"},
		{"a soak over a day", func(m *manifest) { m.d.Rollout = &Rollout{Batches: []Batch{{Count: 1, Soak: 25 * time.Hour}}} },
			"Deployment().Rollout.Batches[0].Soak 25h0m0s: use whole seconds up to 24h"},
		{"an unknown failure policy", func(m *manifest) { m.d.Rollout = &Rollout{OnFailure: "Retry"} },
			`Deployment().Rollout.OnFailure "Retry": use Fail, Pause or Rollback`},
		{"a budget with a count and a percentage", func(m *manifest) {
			m.d.Rollout = &Rollout{DisruptionBudget: &DisruptionBudget{LabelKey: "site", MaxUnavailable: 1, MaxUnavailablePercent: 10}}
		}, "Deployment().Rollout.DisruptionBudget: set exactly one of MaxUnavailable"},
		{"a port out of range", func(m *manifest) { m.d.Services[0].Ports = []string{"8080:80", "70000:80"} }, `Ports[1] "70000:80"`},
		{"a port zero", func(m *manifest) { m.d.Services[0].Ports = []string{"0:80"} }, `Ports[0] "0:80"`},
		{"one host port published twice by a service names both and the fix", func(m *manifest) { m.d.Services[0].Ports = []string{"8080:80", "8080:81"} },
			`Deployment().Services[0] (web).Ports[1] "8080:81": host port tcp/8080 is also published by Deployment().Services[0] (web).Ports[0]: publish each host port once per protocol`},
		{"one host port published by two services, one without a protocol", func(m *manifest) {
			m.d.Services[0].Ports = []string{"8080:80"}
			m.d.Services = append(m.d.Services, Service{Name: "api", Image: "web", Ports: []string{"9090:90", "8080:8080/tcp"}})
		}, `Deployment().Services[1] (api).Ports[1] "8080:8080/tcp": host port tcp/8080 is also published by Deployment().Services[0] (web).Ports[0]`},
		{"more than 256 ports in all", func(m *manifest) {
			for i := range 5 {
				svc := Service{Name: fmt.Sprintf("s%d", i), Image: "web"}
				for j := range 60 {
					svc.Ports = append(svc.Ports, fmt.Sprintf("%d:80", 1+i*60+j))
				}
				m.d.Services = append(m.d.Services, svc)
			}
		}, "Deployment().Services publish 300 ports in all: use at most 256"},
		{"a port with an unknown protocol", func(m *manifest) { m.d.Services[0].Ports = []string{"53:53/sctp"} }, `Ports[0] "53:53/sctp"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.change(&m)
			err := validateApp(m)
			if !errors.Is(err, ErrManifest) || !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("got %v, want ErrManifest naming %q", err, tc.names)
			}
		})
	}
}

func TestARolloutAndHealthChecksReachTheDeployment(t *testing.T) {
	app := manifest{
		images: []Image{{Name: "web", Context: "web"}},
		d: Deployment{Name: "shop", Placement: map[string]string{"role": "till"},
			Services: []Service{{Name: "web", Image: "web", Healthcheck: &Healthcheck{Command: []string{"/bin/check"}, Interval: 10 * time.Second,
				StartPeriod: 90 * time.Second, Retries: 2}}},
			Rollout: &Rollout{Batches: []Batch{{Count: 2, SuccessThreshold: 50, Soak: 5 * time.Minute}, {Selector: map[string]string{"site": "b"}}},
				ManualApproval: true, OnFailure: "Rollback", DisruptionBudget: &DisruptionBudget{LabelKey: "site", MaxUnavailablePercent: 10}}},
	}
	if err := validateApp(app); err != nil {
		t.Fatal(err)
	}
	c, err := selectContext(app, "prod")
	if err != nil {
		t.Fatal(err)
	}
	got := fleetDeployment(app, c, "abc", map[string]string{"web": "hub.example:5000/shop/web@" + digest})
	wantRollout := fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate,
		Batches: []fleetv1.RolloutBatch{{Count: new(int32(2)), SuccessThreshold: 50, Soak: "5m0s"},
			{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "b"}}, SuccessThreshold: 100}},
		Approval: fleetv1.RolloutApprovalManual, OnFailure: fleetv1.RolloutOnFailureRollback,
		DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromString("10%")}}
	if diff := cmp.Diff(wantRollout, got.Spec.Rollout); diff != "" {
		t.Errorf("rollout (-want +got):\n%s", diff)
	}
	wantCheck := &score.Healthcheck{Command: []string{"/bin/check"}, Interval: "10s", StartPeriod: "1m30s", Retries: 2}
	if diff := cmp.Diff(wantCheck, got.Spec.Score.Data.Services[0].Healthcheck); diff != "" {
		t.Errorf("health check (-want +got):\n%s", diff)
	}
}

func TestValidPortsAreAccepted(t *testing.T) {
	m := manifest{images: []Image{{Name: "web", Context: "web"}}, d: Deployment{Name: "shop", Services: []Service{
		{Name: "web", Image: "web", Ports: []string{"1:1", "8080:80", "53:53/udp", "443:8443/tcp", "65535:65535", "8080:80/udp"}}}}}
	if err := validateApp(m); err != nil {
		t.Fatal(err)
	}
}

func TestShipRefusesAnUnusedImageBeforeAnyNetworkCallOrBuild(t *testing.T) {
	m := manifest{images: []Image{{Name: "web", Context: "web"}, {Name: "worker", Context: "worker"}},
		d: Deployment{Name: "shop", Services: []Service{{Name: "web", Image: "web"}}}}
	var stdout, stderr strings.Builder
	code := Run(t.Context(), m, Options{Args: []string{"ship", "--context", "prod", "--tag", "abc"}, Stdout: &stdout, Stderr: &stderr,
		Getenv: func(string) string { t.Error("the environment was read"); return "" },
		openStore: func(OpenBao) (cisecret.Store, error) {
			t.Error("OpenBao was opened")
			return nil, errors.New("no")
		}})
	if code != ExitUsage || !strings.Contains(stderr.String(), "Images()[1] (worker) is used by no service") || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want %d naming Images()[1] and nothing shipped", code, stdout.String(), stderr.String(), ExitUsage)
	}
}
