package score_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/score"
)

const digest = "@sha256:1111111111111111111111111111111111111111111111111111111111111111"

func valid() score.Score {
	return score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{
		InitContainer: &score.Service{Name: "migrate", Image: "registry.example.com/migrate" + digest, RestartPolicy: score.RestartNo},
		Services: []score.Service{{
			Name: "api", Image: "registry.example.com:5000/api:v1.2.3", Ports: []string{"8080:8080", "53:53/udp"},
			Env:           []score.EnvVar{{Name: "MODE", Value: "prod"}},
			SecretEnv:     []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/analysis/db", Key: "password"}},
			Volumes:       []score.Volume{{HostPath: "/var/lib/analysis", ContainerPath: "/data"}},
			RestartPolicy: score.RestartUnlessStopped, ImagePullSecret: "hub-pull",
		}},
	}}
}

func TestValidateNamesTheFieldAndTheFix(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*score.Score)
		want   []string // each must be in the error; none: valid
	}{
		{"a complete score is valid", func(*score.Score) {}, nil},
		{"a score of one service without an init container is valid", func(s *score.Score) { s.Data.InitContainer = nil }, nil},
		{"an empty restart policy is valid (the default)", func(s *score.Score) { s.Data.Services[0].RestartPolicy = "" }, nil},
		{"an image with a tag and a digest is valid", func(s *score.Score) { s.Data.Services[0].Image = "api:v1" + digest }, nil},
		{"a type other than PodmanV0 is named", func(s *score.Score) { s.Type = "Helm" },
			[]string{`score.type "Helm"`, `use "PodmanV0"`}},
		{"no services is named", func(s *score.Score) { s.Data.Services = nil }, []string{"score.data.services: is empty"}},
		{"33 services are too many", func(s *score.Score) {
			s.Data.Services = nil
			for i := range 33 {
				s.Data.Services = append(s.Data.Services, score.Service{Name: "s" + strings.Repeat("x", i), Image: "a:b"})
			}
		}, []string{"score.data.services: has 33 services: use at most 32"}},
		{"an init container with ports is named", func(s *score.Score) { s.Data.InitContainer.Ports = []string{"80:80"} },
			[]string{"score.data.init_container.ports: must be empty"}},
		{"two services with one name are named", func(s *score.Score) { s.Data.Services = append(s.Data.Services, s.Data.Services[0]) },
			[]string{`score.data.services[1].name "api": is also services[0].name`}},
		{"an init container named like a service is named", func(s *score.Score) { s.Data.InitContainer.Name = "api" },
			[]string{`score.data.services[0].name "api": is also init_container.name`}},
		{"a container name with a space is named", func(s *score.Score) { s.Data.Services[0].Name = "my api" },
			[]string{`score.data.services[0].name "my api": use 1 to 63 letters`}},
		{"a container name of 64 characters is named", func(s *score.Score) { s.Data.Services[0].Name = strings.Repeat("a", 64) },
			[]string{"score.data.services[0].name", "is 64 characters long"}},
		{"an image without a tag or digest is named", func(s *score.Score) { s.Data.Services[0].Image = "registry.example.com:5000/api" },
			[]string{`score.data.services[0].image "registry.example.com:5000/api": has no tag or digest; name a digest`}},
		{"an image with spaces and capitals says what is wrong with it", func(s *score.Score) { s.Data.Services[0].Image = "localhost/Fleet Examples/x::v1" },
			[]string{`score.data.services[0].image "localhost/Fleet Examples/x::v1": contains a space; has capitals (the repository must be lowercase); has an empty part ("::"); name a digest`}},
		{"an image with a short digest is named", func(s *score.Score) { s.Data.Services[0].Image = "api@sha256:abc" },
			[]string{"score.data.services[0].image", "name a digest"}},
		{"a port out of range is named", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "8080:70000"} },
			[]string{`score.data.services[0].ports[1] "8080:70000": container port 70000 is outside 1..65535: use host:container with numbers in 1..65535`}},
		{"a host port of zero is named", func(s *score.Score) { s.Data.Services[0].Ports = []string{"0:80/udp"} },
			[]string{`score.data.services[0].ports[0] "0:80/udp": host port 0 is outside 1..65535: use host:container`}},
		{"65 ports are too many", func(s *score.Score) { s.Data.Services[0].Ports = make([]string, 65) },
			[]string{"score.data.services[0].ports: has 65 entries: use at most 64"}},
		{"one host port published twice in a service is named with the fix", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "8080:81"} },
			[]string{`score.data.services[0].ports[1] "8080:81": host port tcp/8080 is published twice by api (ports[0] and ports[1]): publish each host port once per protocol`}},
		{"one host port published by two services is named", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "web", Image: "web:v1", Ports: []string{"9090:90", "8080:80/tcp"}})
		}, []string{`score.data.services[1].ports[1] "8080:80/tcp": host port tcp/8080 is published by both api and web (services[0].ports[0] and services[1].ports[1])`}},
		{"a port without a protocol clashes with the same port over tcp", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80/tcp", "8080:80"} },
			[]string{`score.data.services[0].ports[1] "8080:80": host port tcp/8080 is published twice`}},
		{"leading zeros do not hide a clash", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "08080:80"} },
			[]string{`score.data.services[0].ports[1] "08080:80": host port tcp/8080 is published twice`}},
		{"one host port over tcp and over udp is valid", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80/tcp", "8080:80/udp"} }, nil},
		{"one host port over udp in two services is named", func(s *score.Score) {
			s.Data.Services = append(s.Data.Services, score.Service{Name: "dns2", Image: "dns:v1", Ports: []string{"53:5353/udp"}})
		}, []string{`score.data.services[1].ports[0] "53:5353/udp": host port udp/53 is published by both api and dns2 (services[0].ports[1] and services[1].ports[0])`}},
		{"one container port behind two host ports is valid", func(s *score.Score) { s.Data.Services[0].Ports = []string{"8080:80", "8081:80"} }, nil},
		{"256 ports across services are valid", func(s *score.Score) { s.Data.Services = portServices(4, 64) }, nil},
		{"257 ports across services are too many", func(s *score.Score) {
			s.Data.Services = append(portServices(4, 64), score.Service{Name: "extra", Image: "x:v1", Ports: []string{"1:1"}})
		}, []string{"score.data.services: publish 257 ports in all: use at most 256 ports across all services"}},
		{"an env name starting with a digit is named", func(s *score.Score) { s.Data.Services[0].Env[0].Name = "1MODE" },
			[]string{`score.data.services[0].env[0].name "1MODE": use a letter or '_'`}},
		{"an env value over 4096 characters is named", func(s *score.Score) { s.Data.Services[0].Env[0].Value = strings.Repeat("é", 4097) },
			[]string{"score.data.services[0].env[0].value: is 4097 characters long: use at most 4096"}},
		{"a secret path with a leading slash is named", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Secret = "/lab/db" },
			[]string{`score.data.services[0].secret_env[0].secret "/lab/db"`}},
		{"a secret env without a key is named", func(s *score.Score) { s.Data.Services[0].SecretEnv[0].Key = "" },
			[]string{"score.data.services[0].secret_env[0].key: is empty"}},
		{"a relative host path is named", func(s *score.Score) { s.Data.Services[0].Volumes[0].HostPath = "var/lib" },
			[]string{`score.data.services[0].volumes[0].host_path "var/lib": use an absolute path`}},
		{"an unknown restart policy is named", func(s *score.Score) { s.Data.Services[0].RestartPolicy = "sometimes" },
			[]string{`score.data.services[0].restart_policy "sometimes": use one of`}},
		{"a pull secret with a slash is named", func(s *score.Score) { s.Data.Services[0].ImagePullSecret = "hub/pull" },
			[]string{`score.data.services[0].image_pull_secret "hub/pull"`}},
		{"the init container's own fields are checked too", func(s *score.Score) { s.Data.InitContainer.Image = "migrate" },
			[]string{`score.data.init_container.image "migrate"`}},
		{"a health check with a command only is valid (the defaults)", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"/bin/true"}}
		}, nil},
		{"a health check at its bounds is valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"/bin/sh", "-c", ""}, Interval: "1h", Timeout: "1s", StartPeriod: "0s", Retries: 100}
		}, nil},
		{"a health check of compound and fractional durations is valid", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"check"}, Interval: "1m30s", Timeout: "1.5s", StartPeriod: "2m500ms", Retries: 1}
		}, nil},
		{"a health check without a command is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Interval: "10s"}
		}, []string{"score.data.services[0].healthcheck.command: is empty: give the program to run"}},
		{"a health check whose program is empty is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"", "x"}}
		}, []string{"score.data.services[0].healthcheck.command[0]: is empty: the first entry is the program to run"}},
		{"a health check in Docker's CMD form is named with the fix", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"CMD", "/bin/true"}}
		}, []string{`score.data.services[0].healthcheck.command[0] "CMD": is Docker's marker, not a program: command is the exec form itself, drop the leading entry`}},
		{"a health check of 65 entries is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: make([]string, 65)}
			s.Data.Services[0].Healthcheck.Command[0] = "x"
		}, []string{"score.data.services[0].healthcheck.command: has 65 entries: use at most 64"}},
		{"a health check argument over 1024 characters is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x", strings.Repeat("é", 1025)}}
		}, []string{"score.data.services[0].healthcheck.command[1]: is 1025 characters long: use at most 1024"}},
		{"a health check interval under a second is named with its bounds", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Interval: "500ms"}
		}, []string{`score.data.services[0].healthcheck.interval "500ms": use a duration from 1s to 1h`}},
		{"a health check interval over an hour is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Interval: "61m"}
		}, []string{`score.data.services[0].healthcheck.interval "61m": use a duration from 1s to 1h`}},
		{"a health check interval without a unit is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Interval: "10"}
		}, []string{`score.data.services[0].healthcheck.interval "10": use a duration`, `like "10s"`}},
		{"a negative start period is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, StartPeriod: "-1s"}
		}, []string{`score.data.services[0].healthcheck.start_period "-1s": use a duration from 0s to 1h`}},
		{"a health check timeout over ten minutes is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Timeout: "11m"}
		}, []string{`score.data.services[0].healthcheck.timeout "11m": use a duration from 1s to 10m`}},
		{"a duration too large for Go is named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Interval: "99999999999h"}
		}, []string{`score.data.services[0].healthcheck.interval "99999999999h": use a duration`}},
		{"101 retries are named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Retries: 101}
		}, []string{`score.data.services[0].healthcheck.retries "101": use 1 to 100 failed checks in a row`}},
		{"negative retries are named", func(s *score.Score) {
			s.Data.Services[0].Healthcheck = &score.Healthcheck{Command: []string{"x"}, Retries: -1}
		}, []string{`score.data.services[0].healthcheck.retries "-1"`}},
		{"a health check on the init container is refused with the fix", func(s *score.Score) {
			s.Data.InitContainer.Healthcheck = &score.Healthcheck{Command: []string{"/bin/true"}}
		}, []string{"score.data.init_container.healthcheck: must be empty: an init container runs to completion", "put the health check on a service"}},
		{"every broken rule is listed, in field order", func(s *score.Score) {
			s.Type = ""
			s.Data.Services[0].Name = "-api"
			s.Data.Services[0].Volumes[0].ContainerPath = "data"
		}, []string{`score.type: use "PodmanV0"`, `; score.data.services[0].name "-api"`, `; score.data.services[0].volumes[0].container_path "data"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := valid()
			tc.mutate(&s)
			err := score.Validate(s)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, score.ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			var fe *score.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error holds no *FieldError: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// portServices is n services of perService distinct host ports each, no
// host port used twice.
func portServices(n, perService int) []score.Service {
	var out []score.Service
	for i := range n {
		svc := score.Service{Name: fmt.Sprintf("s%d", i), Image: "s:v1"}
		for j := range perService {
			svc.Ports = append(svc.Ports, fmt.Sprintf("%d:80", 10000+i*perService+j))
		}
		out = append(out, svc)
	}
	return out
}

func TestAnErrorQuotesAtMost100CharactersOfAValue(t *testing.T) {
	err := (&score.FieldError{Field: "f", Value: strings.Repeat("x", 500), Fix: "fix"}).Error()
	if want := `f "` + strings.Repeat("x", 100) + `…": fix`; err != want {
		t.Errorf("got %s", err)
	}
}

func TestParsePort(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want score.Port
		ok   bool
	}{
		{"a mapping without a protocol is TCP", "8080:80", score.Port{Host: 8080, Container: 80, Protocol: score.TCP}, true},
		{"a UDP mapping is UDP", "53:53/udp", score.Port{Host: 53, Container: 53, Protocol: score.UDP}, true},
		{"an explicit TCP mapping is TCP", "443:8443/tcp", score.Port{Host: 443, Container: 8443, Protocol: score.TCP}, true},
		{"the bounds 1 and 65535 are valid", "1:65535", score.Port{Host: 1, Container: 65535, Protocol: score.TCP}, true},
		{"leading zeros count as the number", "00080:080", score.Port{Host: 80, Container: 80, Protocol: score.TCP}, true},
		{"a port of zero is refused", "0:80", score.Port{}, false},
		{"a port above 65535 is refused", "65536:80", score.Port{}, false},
		{"six digits are refused even when the value is small", "000080:80", score.Port{}, false},
		{"a mapping without a host side is refused", "80", score.Port{}, false},
		{"an unknown protocol is refused", "53:53/sctp", score.Port{}, false},
		{"an upper-case protocol is refused", "53:53/UDP", score.Port{}, false},
		{"a host address is refused", "127.0.0.1:80:80", score.Port{}, false},
		{"a sign is refused", "+80:80", score.Port{}, false},
		{"a trailing newline is refused", "80:80\n", score.Port{}, false},
		{"an empty mapping is refused", "", score.Port{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := score.ParsePort(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("error %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				out := map[string]string{"0:80": "host port 0 is outside 1..65535: ", "65536:80": "host port 65536 is outside 1..65535: ",
					"80:0": "container port 0 is outside 1..65535: ", "80:65536": "container port 65536 is outside 1..65535: "}[tc.in]
				want := "port " + strconv.Quote(tc.in) + ": " + out + "use host:container with numbers in 1..65535, optionally /tcp or /udp"
				if tc.in == "" {
					want = "port: use host:container with numbers in 1..65535, optionally /tcp or /udp"
				}
				if err.Error() != want {
					t.Errorf("error %q, want %q", err, want)
				}
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsePortsStopsAtTheFirstMalformedMapping(t *testing.T) {
	got, err := score.ParsePorts([]string{"1:2", "3:4/udp"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]score.Port{{Host: 1, Container: 2, Protocol: score.TCP}, {Host: 3, Container: 4, Protocol: score.UDP}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := score.ParsePorts([]string{"1:2", "x", "y"}); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("error %v, want the first malformed mapping", err)
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		ok       bool
	}{
		{"letters, digits, '_', '.' and '-' are a name", "api_v1.2-b", true},
		{"63 characters are a name", strings.Repeat("a", 63), true},
		{"an empty name is refused", "", false},
		{"64 characters are refused", strings.Repeat("a", 64), false},
		{"a leading '.' is refused", ".api", false},
		{"a space is refused", "my api", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := score.ValidateName(tc.in); (err == nil) != tc.ok {
				t.Errorf("error %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestParseDecodesAndValidates(t *testing.T) {
	s, err := score.Parse([]byte(`{"type":"PodmanV0","data":{"services":[{"name":"a","image":"a:1","unknown":true}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Data.Services[0].Name != "a" {
		t.Errorf("got %+v", s)
	}
	if _, err := score.Parse([]byte(`{"type":"PodmanV0","data":{"services":[]}}`)); !errors.Is(err, score.ErrInvalid) {
		t.Errorf("an invalid score: %v", err)
	}
	if _, err := score.Parse([]byte(`[`)); err == nil || !strings.HasPrefix(err.Error(), "score: ") {
		t.Errorf("JSON that does not decode: %v", err)
	}
}

func TestHostPortClashesNamesEveryMappingThatRepeatsAHostPortAndProtocol(t *testing.T) {
	tests := []struct {
		name  string
		ports [][]string
		want  []score.PortClash
	}{
		{"distinct host ports do not clash", [][]string{{"8080:80", "8081:80"}, {"9090:90"}}, nil},
		{"one host port over tcp and over udp does not clash", [][]string{{"8080:80/tcp"}, {"8080:80/udp"}}, nil},
		{"one host port twice in a service clashes", [][]string{{"8080:80", "8080:81"}},
			[]score.PortClash{{Service: 0, Mapping: 1, FirstService: 0, FirstMapping: 0, Host: 8080, Protocol: score.TCP}}},
		{"a port without a protocol clashes with tcp in another service", [][]string{{"53:53/udp", "8080:80"}, {"8080:8080/tcp"}},
			[]score.PortClash{{Service: 1, Mapping: 0, FirstService: 0, FirstMapping: 1, Host: 8080, Protocol: score.TCP}}},
		{"leading zeros do not hide a clash", [][]string{{"00053:53/udp"}, {"53:5353/udp"}},
			[]score.PortClash{{Service: 1, Mapping: 0, FirstService: 0, FirstMapping: 0, Host: 53, Protocol: score.UDP}}},
		{"every repeat names the first mapping", [][]string{{"1:1", "1:2"}, {"1:3"}},
			[]score.PortClash{{Service: 0, Mapping: 1, Host: 1, Protocol: score.TCP}, {Service: 1, Mapping: 0, Host: 1, Protocol: score.TCP}}},
		{"malformed mappings are skipped", [][]string{{"x", "8080"}, {"x"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, score.HostPortClashes(tc.ports)); diff != "" {
				t.Errorf("clashes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHealthSettingsApplyPodmansDefaults(t *testing.T) {
	tests := []struct {
		name  string
		check score.Healthcheck
		want  score.HealthSettings
	}{
		{"a command alone gets every default", score.Healthcheck{Command: []string{"x"}},
			score.HealthSettings{Command: []string{"x"}, Interval: 30 * time.Second, Timeout: 30 * time.Second, StartPeriod: 0, Retries: 3}},
		{"set fields are kept", score.Healthcheck{Command: []string{"x"}, Interval: "1m30s", Timeout: "1.5s", StartPeriod: "10s", Retries: 7},
			score.HealthSettings{Command: []string{"x"}, Interval: 90 * time.Second, Timeout: 1500 * time.Millisecond, StartPeriod: 10 * time.Second, Retries: 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, tc.check.Settings()); diff != "" {
				t.Errorf("Settings (-want +got):\n%s", diff)
			}
		})
	}
}
