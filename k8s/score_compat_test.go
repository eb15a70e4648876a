package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/score"
)

// The Deployment CRD's spec.score is package score's Score: its markers are
// what the API server enforces, and score.Validate is the same contract for
// code without Kubernetes (the agent, harmony). This test keeps the two
// agreeing: the same scores accepted and refused.

// TestScoreValidateAndTheAPIServerAgree runs every score of the table
// through score.Validate and through the API server's validation of a
// Deployment (OpenAPI schema and CEL rules); both must accept, or both
// refuse. A score the API server accepts is read back, defaults applied,
// and must parse with score.Parse.
func TestScoreValidateAndTheAPIServerAgree(t *testing.T) {
	c := newClient(t)
	const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	long := func(n int) string { return strings.Repeat("a", n) }
	services := func(n int) []score.Service {
		var out []score.Service
		for i := range n {
			out = append(out, score.Service{Name: fmt.Sprintf("s%d", i), Image: "reg.example/s:v1"})
		}
		return out
	}
	tests := []struct {
		name   string
		mutate func(*score.Score)
		valid  bool
	}{
		{"the complete example is valid", func(*score.Score) {}, true},
		{"a score without an init container is valid", func(s *score.Score) { s.Data.InitContainer = nil }, true},
		{"a type other than PodmanV0 is refused", func(s *score.Score) { s.Type = "Helm" }, false},
		{"an empty type is refused", func(s *score.Score) { s.Type = "" }, false},
		{"no services are refused", func(s *score.Score) { s.Data.Services = nil }, false},
		{"an empty service list is refused", func(s *score.Score) { s.Data.Services = []score.Service{} }, false},
		{"32 services are valid", func(s *score.Score) { s.Data.Services = services(32) }, true},
		{"33 services are refused", func(s *score.Score) { s.Data.Services = services(33) }, false},
		{"an init container with ports is refused", func(s *score.Score) { s.Data.InitContainer.Ports = []string{"80:80"} }, false},
		{"two services with one name are refused", func(s *score.Score) { s.Data.Services = append(s.Data.Services, s.Data.Services[0]) }, false},
		{"names differing only in case are valid", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "API", Image: "reg.example/s:v1"})
		}, true},
		{"an init container named like a service is refused", func(s *score.Score) { s.Data.InitContainer.Name = "api" }, false},
		{"a name with '_', '.' and '-' is valid", func(s *score.Score) { s.Data.Services[0].Name = "api_v1.2-b" }, true},
		{"a name of 63 characters is valid", func(s *score.Score) { s.Data.Services[0].Name = long(63) }, true},
		{"a name of 64 characters is refused", func(s *score.Score) { s.Data.Services[0].Name = long(64) }, false},
		{"an empty name is refused", func(s *score.Score) { s.Data.Services[0].Name = "" }, false},
		{"a name with a space is refused", func(s *score.Score) { s.Data.Services[0].Name = "my api" }, false},
		{"a name starting with '-' is refused", func(s *score.Score) { s.Data.Services[0].Name = "-api" }, false},
		{"a name starting with '_' is refused", func(s *score.Score) { s.Data.Services[0].Name = "_api" }, false},
		{"an init container's invalid name is refused", func(s *score.Score) { s.Data.InitContainer.Name = "mi grate" }, false},
		{"an image with a tag is valid", func(s *score.Score) { s.Data.Services[0].Image = "api:v1" }, true},
		{"an image with a digest is valid", func(s *score.Score) { s.Data.Services[0].Image = "reg.example/api@sha256:" + hex64 }, true},
		{"an image with a tag and a digest is valid", func(s *score.Score) { s.Data.Services[0].Image = "reg.example/api:v1@sha256:" + hex64 }, true},
		{"an image on a registry port with a tag is valid", func(s *score.Score) { s.Data.Services[0].Image = "reg.example:5000/api:v1" }, true},
		{"an image without a tag or digest is refused", func(s *score.Score) { s.Data.Services[0].Image = "reg.example:5000/api" }, false},
		{"an image with a short digest is refused", func(s *score.Score) { s.Data.Services[0].Image = "api@sha256:abc" }, false},
		{"an image with an upper-case digest is refused", func(s *score.Score) {
			s.Data.Services[0].Image = "api@sha256:" + strings.ToUpper(hex64)
		}, false},
		{"an image with a space is refused", func(s *score.Score) { s.Data.Services[0].Image = "reg example/api:v1" }, false},
		{"an image without a repository is refused", func(s *score.Score) { s.Data.Services[0].Image = ":v1" }, false},
		{"an empty image is refused", func(s *score.Score) { s.Data.Services[0].Image = "" }, false},
		{"a tag of 128 characters is valid", func(s *score.Score) { s.Data.Services[0].Image = "api:" + long(128) }, true},
		{"a tag of 129 characters is refused", func(s *score.Score) { s.Data.Services[0].Image = "api:" + long(129) }, false},
		{"a tag starting with '.' is refused", func(s *score.Score) { s.Data.Services[0].Image = "api:.v1" }, false},
		{"an image of 512 characters is valid", func(s *score.Score) { s.Data.Services[0].Image = long(509) + ":v1" }, true},
		{"an image of 513 characters is refused", func(s *score.Score) { s.Data.Services[0].Image = long(510) + ":v1" }, false},
		{"an image of 512 non-ASCII characters is valid", func(s *score.Score) { s.Data.Services[0].Image = strings.Repeat("é", 509) + ":v1" }, true},
		{"an init container's image without a tag is refused", func(s *score.Score) { s.Data.InitContainer.Image = "migrate" }, false},
		{"ports at the bounds 1 and 65535 are valid", func(s *score.Score) { s.Data.Services[0].Ports = []string{"1:1", "65535:65535/udp"} }, true},
		{"a port with leading zeros is valid", func(s *score.Score) { s.Data.Services[0].Ports = []string{"00080:080/tcp"} }, true},
		{"a port of six digits is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"000080:80"} }, false},
		{"a port of zero is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"0:80"} }, false},
		{"a container port above 65535 is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:65536"} }, false},
		{"a port without a host part is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080"} }, false},
		{"a port with an unknown protocol is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"53:53/sctp"} }, false},
		{"a port with a host address is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"127.0.0.1:80:80"} }, false},
		{"64 ports are valid", func(s *score.Score) { s.Data.Services[0].Ports = portList(64) }, true},
		{"65 ports are refused", func(s *score.Score) { s.Data.Services[0].Ports = portList(65) }, false},
		{"one host port published twice in a service is refused", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "8080:81"} }, false},
		{"one host port published by two services is refused", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "web", Image: "reg.example/web:v1", Ports: []string{"8080:80"}})
		}, false},
		{"a port without a protocol clashes with the same host port over tcp", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "web", Image: "reg.example/web:v1", Ports: []string{"8080:80/tcp"}})
		}, false},
		{"leading zeros do not hide a host port published twice", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "08080:80"} }, false},
		{"one host port over udp in two services is refused", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "dns2", Image: "reg.example/dns:v1", Ports: []string{"53:5353/udp"}})
		}, false},
		{"one host port over tcp and over udp is valid", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80/tcp", "8080:80/udp"} }, true},
		{"one host port over tcp and udp in two services is valid", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "web", Image: "reg.example/web:v1", Ports: []string{"8080:8080/udp"}})
		}, true},
		{"one container port behind two host ports is valid", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "8081:80"} }, true},
		{"256 distinct ports across services are valid within the CEL cost budget", func(s *score.Score) { s.Data.Services = portServices(4, 64) }, true},
		{"255 distinct ports and one published twice are refused", func(s *score.Score) {
			s.Data.Services = portServices(4, 64)
			s.Data.Services[3].Ports[63] = s.Data.Services[0].Ports[0]
		}, false},
		{"257 ports across services are refused", func(s *score.Score) {
			s.Data.Services = append(portServices(4, 64), score.Service{Name: "extra", Image: "reg.example/x:v1", Ports: []string{"1:1"}})
		}, false},
		{"32 services of 64 ports each are refused by the total, not by the cost budget", func(s *score.Score) { s.Data.Services = portServices(32, 64) }, false},
		{"an env name starting with '_' is valid", func(s *score.Score) { s.Data.Services[0].Env[0].Name = "_MODE" }, true},
		{"an env name starting with a digit is refused", func(s *score.Score) { s.Data.Services[0].Env[0].Name = "1MODE" }, false},
		{"an env name with '-' is refused", func(s *score.Score) { s.Data.Services[0].Env[0].Name = "MY-MODE" }, false},
		{"an empty env name is refused", func(s *score.Score) { s.Data.Services[0].Env[0].Name = "" }, false},
		{"an env name of 128 characters is valid", func(s *score.Score) { s.Data.Services[0].Env[0].Name = long(128) }, true},
		{"an env name of 129 characters is refused", func(s *score.Score) { s.Data.Services[0].Env[0].Name = long(129) }, false},
		{"an empty env value is valid", func(s *score.Score) { s.Data.Services[0].Env[0].Value = "" }, true},
		{"an env value of 4096 non-ASCII characters is valid", func(s *score.Score) { s.Data.Services[0].Env[0].Value = strings.Repeat("é", 4096) }, true},
		{"an env value of 4097 characters is refused", func(s *score.Score) { s.Data.Services[0].Env[0].Value = long(4097) }, false},
		{"128 env variables are valid", func(s *score.Score) { s.Data.Services[0].Env = envList(128) }, true},
		{"129 env variables are refused", func(s *score.Score) { s.Data.Services[0].Env = envList(129) }, false},
		{"a secret env name starting with a digit is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Name = "9X" }, false},
		{"a secret path of one segment is valid", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = "db" }, true},
		{"a secret path with a leading slash is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = "/lab/db" }, false},
		{"a secret path with a trailing slash is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = "lab/db/" }, false},
		{"a secret path with an empty segment is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = "lab//db" }, false},
		{"an empty secret path is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = "" }, false},
		{"a secret path of 512 characters is valid", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = long(255) + "/" + long(256) }, true},
		{"a secret path of 513 characters is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = long(256) + "/" + long(256) }, false},
		{"a secret key with any characters is valid", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Key = "pass word/é" }, true},
		{"an empty secret key is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Key = "" }, false},
		{"a secret key of 253 characters is valid", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Key = long(253) }, true},
		{"a secret key of 254 characters is refused", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Key = long(254) }, false},
		{"129 secret env variables are refused", func(s *score.Score) {
			for i := range 129 {
				s.Data.Services[0].SecretEnv = append(s.Data.Services[0].SecretEnv, score.SecretEnv{Name: fmt.Sprintf("S%d", i), Secret: "db", Key: "k"})
			}
		}, false},
		{"the root as a host path is valid", func(s *score.Score) { s.Data.Services[0].Volumes[0].HostPath = "/" }, true},
		{"a relative host path is refused", func(s *score.Score) { s.Data.Services[0].Volumes[0].HostPath = "var/lib" }, false},
		{"a relative container path is refused", func(s *score.Score) { s.Data.Services[0].Volumes[0].ContainerPath = "data" }, false},
		{"an empty host path is refused", func(s *score.Score) { s.Data.Services[0].Volumes[0].HostPath = "" }, false},
		{"a path of 4096 characters is valid", func(s *score.Score) { s.Data.Services[0].Volumes[0].ContainerPath = "/" + long(4095) }, true},
		{"a path of 4097 characters is refused", func(s *score.Score) { s.Data.Services[0].Volumes[0].ContainerPath = "/" + long(4096) }, false},
		{"32 volumes are valid", func(s *score.Score) { s.Data.Services[0].Volumes = volumeList(32) }, true},
		{"33 volumes are refused", func(s *score.Score) { s.Data.Services[0].Volumes = volumeList(33) }, false},
		{"an empty restart policy is valid (defaulted)", func(s *score.Score) { s.Data.Services[0].RestartPolicy = "" }, true},
		{"restart policy no is valid", func(s *score.Score) { s.Data.Services[0].RestartPolicy = score.RestartNo }, true},
		{"restart policy always is valid", func(s *score.Score) { s.Data.Services[0].RestartPolicy = score.RestartAlways }, true},
		{"restart policy on-failure is valid", func(s *score.Score) { s.Data.Services[0].RestartPolicy = score.RestartOnFailure }, true},
		{"an unknown restart policy is refused", func(s *score.Score) { s.Data.Services[0].RestartPolicy = "sometimes" }, false},
		{"a restart policy in another case is refused", func(s *score.Score) { s.Data.Services[0].RestartPolicy = "Always" }, false},
		{"an empty pull secret is valid (none)", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = "" }, true},
		{"a pull secret with '.', '_' and '-' is valid", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = "hub.pull_1-x" }, true},
		{"a pull secret with a slash is refused", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = "hub/pull" }, false},
		{"a pull secret starting with '-' is refused", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = "-hub" }, false},
		{"a pull secret of 253 characters is valid", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = long(253) }, true},
		{"a pull secret of 254 characters is refused", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = long(254) }, false},
		{"a health check with a command only is valid", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{}) }, true},
		{"a health check at its bounds is valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "1h", Timeout: "10m", StartPeriod: "0s", Retries: 100})
		}, true},
		{"a health check at its lower bounds is valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "1s", Timeout: "1s", StartPeriod: "1h", Retries: 1})
		}, true},
		{"compound and fractional durations are valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "1m30s", Timeout: "1.5s", StartPeriod: "2m500ms"})
		}, true},
		{"a health check without a command is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{}, Interval: "10s"}
		}, false},
		{"a health check whose program is empty is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"", "x"}}
		}, false},
		{"a health check in Docker's CMD form is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"CMD", "/bin/true"}}
		}, false},
		{"a health check in Docker's CMD-SHELL form is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"CMD-SHELL", "true"}}
		}, false},
		{"a health check of 64 entries is valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: append([]string{"x"}, make([]string, 63)...)}
		}, true},
		{"a health check of 65 entries is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: append([]string{"x"}, make([]string, 64)...)}
		}, false},
		{"a health check argument of 1024 characters is valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x", long(1024)}}
		}, true},
		{"a health check argument of 1025 characters is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x", long(1025)}}
		}, false},
		{"an interval under a second is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "999ms"}) }, false},
		{"an interval over an hour is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "1h1s"}) }, false},
		{"an interval without a unit is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "10"}) }, false},
		{"an interval with a sign is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "+10s"}) }, false},
		{"an interval with a leading dot is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: ".5h"}) }, false},
		{"an interval too large for a duration is refused", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Interval: "99999999999h"})
		}, false},
		{"a timeout over ten minutes is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Timeout: "10m1s"}) }, false},
		{"a timeout under a second is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Timeout: "900ms"}) }, false},
		{"a start period over an hour is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{StartPeriod: "61m"}) }, false},
		{"a negative start period is refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{StartPeriod: "-1s"}) }, false},
		{"101 retries are refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Retries: 101}) }, false},
		{"negative retries are refused", func(s *score.Score) { s.Data.Services[0].Healthcheck = hc(score.Healthcheck{Retries: -1}) }, false},
		{"a health check on the init container is refused", func(s *score.Score) { s.Data.InitContainer.Healthcheck = hc(score.Healthcheck{}) }, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := exampleScore(t)
			tc.mutate(&s)
			pkgErr := score.Validate(s)
			stored, apiErr := apply(t, c, fmt.Sprintf("agree-%d", i), s)
			if (pkgErr == nil) != tc.valid {
				t.Errorf("score.Validate: %v, want valid=%v", pkgErr, tc.valid)
			}
			if (apiErr == nil) != tc.valid {
				t.Errorf("the API server: %v, want valid=%v", apiErr, tc.valid)
			}
			if apiErr != nil {
				return
			}
			raw, err := json.Marshal(stored)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := score.Parse(raw); err != nil {
				t.Errorf("the score the API server stored does not parse: %v", err)
			}
		})
	}
}

// exampleScore is validDeployment's score.
func exampleScore(t *testing.T) score.Score {
	t.Helper()
	return validDeployment("x").Spec.Score
}

// apply creates a Deployment with (a copy of) score s and deletes it
// again; it returns the score the API server stored (defaults applied) or
// its refusal.
func apply(t *testing.T, c client.Client, name string, s score.Score) (score.Score, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d := validDeployment(name)
	d.Spec.Score = *s.DeepCopy()
	if err := c.Create(ctx, d); err != nil {
		return score.Score{}, err
	}
	if err := c.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	return d.Spec.Score, nil
}

func portList(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("%d:80", 10000+i))
	}
	return out
}

// portServices is n services of perService ports each, no host port used
// twice.
func portServices(n, perService int) []score.Service {
	var out []score.Service
	for i := range n {
		svc := score.Service{Name: fmt.Sprintf("s%d", i), Image: "reg.example/s:v1"}
		for j := range perService {
			svc.Ports = append(svc.Ports, fmt.Sprintf("%d:80", 1+i*perService+j))
		}
		out = append(out, svc)
	}
	return out
}

func envList(n int) []score.EnvVar {
	var out []score.EnvVar
	for i := range n {
		out = append(out, score.EnvVar{Name: fmt.Sprintf("V%d", i), Value: "x"})
	}
	return out
}

func volumeList(n int) []score.Volume {
	var out []score.Volume
	for i := range n {
		out = append(out, score.Volume{HostPath: fmt.Sprintf("/h%d", i), ContainerPath: fmt.Sprintf("/c%d", i)})
	}
	return out
}

// hc is h with the command /bin/true.
func hc(h score.Healthcheck) *score.Healthcheck {
	h.Command = []string{"/bin/true"}
	return &h
}
