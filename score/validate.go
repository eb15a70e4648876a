package score

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The CRD's limits (the kubebuilder markers in score.go). Lengths count
// characters (Unicode code points), as the API server does.
const (
	maxServices         = 32
	maxPorts            = 64
	maxEnv              = 128
	maxSecretEnv        = 128
	maxVolumes          = 32
	maxNameLength       = 63
	maxImageLength      = 512
	maxEnvNameLength    = 128
	maxEnvValueLength   = 4096
	maxSecretLength     = 512
	maxSecretKeyLength  = 253
	maxPathLength       = 4096
	maxPullSecretLength = 253
)

// The CRD's patterns and the image rule of its CEL validation.
var (
	nameRE       = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	secretPathRE = regexp.MustCompile(`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`)
	imageDigest  = regexp.MustCompile(`^[^@\s]+@sha256:[a-f0-9]{64}$`)
	imageTag     = regexp.MustCompile(`^[^@\s]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[a-f0-9]{64})?$`)
	// imageCapitals: a capital letter in the repository (after an
	// optional host[:port]/, before the tag or digest).
	imageCapitals = regexp.MustCompile(`^([^@:/]*(:[0-9]+)?/)?[^@:]*[A-Z]`)
	imageHasTag   = regexp.MustCompile(`:[^/]*$`)
)

// imageProblems says what is wrong with an image reference the rule
// refuses, as the CRD's CEL message does: each problem found followed by
// "; " ("" when none of these).
func imageProblems(image string) string {
	var b strings.Builder
	if strings.Contains(image, " ") {
		b.WriteString("contains a space; ")
	}
	if imageCapitals.MatchString(image) {
		b.WriteString("has capitals (the repository must be lowercase); ")
	}
	if strings.Contains(image, "::") {
		b.WriteString(`has an empty part ("::"); `)
	}
	if !strings.Contains(image, "@") && !imageHasTag.MatchString(image) {
		b.WriteString("has no tag or digest; ")
	}
	return b.String()
}

// Fixes shared by Validate and the single-field checks.
const (
	nameFix  = "use 1 to 63 letters, digits, '_', '.' and '-', starting with a letter or digit"
	imageFix = "name a digest (repo@sha256:<64 hex>) or an explicit tag (repo:tag)"
)

// Parse decodes the JSON of a score and validates it. Unknown fields are
// ignored (the API server prunes them before a score is stored). A score
// that breaks a rule is a *ValidationError.
func Parse(raw []byte) (Score, error) {
	var s Score
	if err := json.Unmarshal(raw, &s); err != nil {
		return Score{}, fmt.Errorf("score: %w", err)
	}
	if err := Validate(s); err != nil {
		return Score{}, err
	}
	return s, nil
}

// Validate checks every rule the Deployment CRD's schema and CEL rules
// enforce on spec.score:
//
//   - type is PodmanV0;
//   - 1 to 32 services with unique names; the init container's name
//     differs from every service's and its ports are empty;
//   - every container: a name of 1 to 63 letters, digits, '_', '.' and
//     '-' starting with a letter or digit; an image of at most 512
//     characters that names a digest or an explicit tag; at most 64 ports,
//     each as ParsePort accepts; at most 128 env and 128 secret_env
//     variables, their names a letter or '_' then letters, digits and '_'
//     (at most 128), env values at most 4096 characters, secret paths of
//     1 to 512 characters in '/'-separated segments of letters, digits,
//     '_', '.' and '-', keys of 1 to 253 characters; at most 32 volumes
//     with absolute host and container paths (at most 4096 characters); a
//     restart policy that is empty or one of RestartPolicies; an image pull
//     secret that is empty or a name like a container's of at most 253;
//   - a service's optional healthcheck: a command of 1 to 64 entries (at
//     most 1024 characters each), the first a program (not empty, not
//     Docker's "CMD", "CMD-SHELL" or "NONE"); durations in Go's syntax
//     (units ns, us, ms, s, m, h) with interval 1s to 1h, timeout 1s to
//     10m, start_period 0s to 1h; retries 1 to 100 (0: the default). The
//     init container has none;
//   - at most MaxPublishedPorts (256) ports in all services together, and
//     no host port published twice with one protocol, in one service or in
//     two (HostPortClashes: a port without a protocol is tcp, so "8080:80"
//     and "8080:81/tcp" clash; "8080:80/tcp" and "8080:80/udp" do not).
//
// It returns nil or a *ValidationError listing every broken rule, each a
// *FieldError whose Field is the JSON path under "score".
func Validate(s Score) error {
	var v validator
	if s.Type != TypePodmanV0 {
		v.add("score.type", string(s.Type), `use "PodmanV0", the only score type`)
	}
	d := s.Data
	switch n := len(d.Services); {
	case n == 0:
		v.add("score.data.services", "", "is empty: declare at least one service")
	case n > maxServices:
		v.add("score.data.services", "", fmt.Sprintf("has %d services: use at most %d", n, maxServices))
	}
	ic := d.InitContainer
	if ic != nil {
		v.service("score.data.init_container", *ic)
		if len(ic.Ports) > 0 {
			v.add("score.data.init_container.ports", "", "must be empty: an init container runs to completion and cannot publish host ports; publish them on a service")
		}
		if ic.Healthcheck != nil {
			v.add("score.data.init_container.healthcheck", "", "must be empty: an init container runs to completion and its exit code is its result; put the health check on a service")
		}
	}
	first := map[string]int{}
	for i, svc := range d.Services {
		field := fmt.Sprintf("score.data.services[%d]", i)
		v.service(field, svc)
		if j, dup := first[svc.Name]; dup {
			v.add(field+".name", svc.Name, fmt.Sprintf("is also services[%d].name: give every service its own name", j))
		} else {
			first[svc.Name] = i
		}
		if ic != nil && svc.Name == ic.Name {
			v.add(field+".name", svc.Name, "is also init_container.name: give the init container a name of its own")
		}
	}
	v.hostPorts(d.Services)
	return v.err()
}

// hostPorts checks that the services publish at most MaxPublishedPorts
// mappings together and no host port twice with one protocol
// (HostPortClashes).
func (v *validator) hostPorts(services []Service) {
	total := 0
	ports := make([][]string, len(services))
	for i, svc := range services {
		total += len(svc.Ports)
		ports[i] = svc.Ports
	}
	for _, c := range HostPortClashes(ports) {
		// The agent's preflight words a clash the same way.
		svc, first := services[c.Service].Name, services[c.FirstService].Name
		what := fmt.Sprintf("host port %s/%d is published by both %s and %s (services[%d].ports[%d] and services[%d].ports[%d])",
			c.Protocol, c.Host, first, svc, c.FirstService, c.FirstMapping, c.Service, c.Mapping)
		if c.Service == c.FirstService {
			what = fmt.Sprintf("host port %s/%d is published twice by %s (ports[%d] and ports[%d])", c.Protocol, c.Host, svc, c.FirstMapping, c.Mapping)
		}
		v.add(fmt.Sprintf("score.data.services[%d].ports[%d]", c.Service, c.Mapping), services[c.Service].Ports[c.Mapping], what+": "+PortClashFix)
	}
	if total > MaxPublishedPorts {
		v.add("score.data.services", "", fmt.Sprintf("publish %d ports in all: use at most %d ports across all services", total, MaxPublishedPorts))
	}
}

// ValidateName checks a container name: 1 to 63 letters, digits, '_', '.'
// and '-', starting with a letter or digit. The error is a *FieldError
// (field "name").
func ValidateName(name string) error {
	if fix := nameProblem(name); fix != "" {
		return &FieldError{Field: "name", Value: name, Fix: fix}
	}
	return nil
}

func nameProblem(name string) string {
	switch {
	case name == "":
		return "is empty: " + nameFix
	case utf8.RuneCountInString(name) > maxNameLength:
		return fmt.Sprintf("is %d characters long: %s", utf8.RuneCountInString(name), nameFix)
	case !nameRE.MatchString(name):
		return nameFix
	}
	return ""
}

// validator collects the broken rules of one score.
type validator struct {
	fields []*FieldError
}

func (v *validator) add(field, value, fix string) {
	v.fields = append(v.fields, &FieldError{Field: field, Value: value, Fix: fix})
}

func (v *validator) err() error {
	if len(v.fields) == 0 {
		return nil
	}
	return &ValidationError{Fields: v.fields}
}

// length checks a string's length in characters; it reports whether the
// string is within max, so that a pattern is checked (and the value quoted)
// only then.
func (v *validator) length(field, value string, minLen, maxLen int) bool {
	switch n := utf8.RuneCountInString(value); {
	case n < minLen:
		v.add(field, "", "is empty: it is required")
		return false
	case n > maxLen:
		v.add(field, "", fmt.Sprintf("is %d characters long: use at most %d", n, maxLen))
		return false
	}
	return true
}

// count checks a list's size.
func (v *validator) count(field string, n, maxItems int) {
	if n > maxItems {
		v.add(field, "", fmt.Sprintf("has %d entries: use at most %d", n, maxItems))
	}
}

// service checks one container at field.
func (v *validator) service(field string, s Service) {
	if fix := nameProblem(s.Name); fix != "" {
		v.add(field+".name", s.Name, fix)
	}
	if v.length(field+".image", s.Image, 0, maxImageLength) && !imageDigest.MatchString(s.Image) && !imageTag.MatchString(s.Image) {
		v.add(field+".image", s.Image, imageProblems(s.Image)+imageFix)
	}
	v.count(field+".ports", len(s.Ports), maxPorts)
	for i, p := range s.Ports {
		if _, err := ParsePort(p); err != nil {
			fix := portFix
			if fe := (*FieldError)(nil); errors.As(err, &fe) {
				fix = fe.Fix
			}
			v.add(field+".ports["+strconv.Itoa(i)+"]", p, fix)
		}
	}
	v.count(field+".env", len(s.Env), maxEnv)
	for i, e := range s.Env {
		f := field + ".env[" + strconv.Itoa(i) + "]"
		v.envName(f+".name", e.Name)
		v.length(f+".value", e.Value, 0, maxEnvValueLength)
	}
	v.count(field+".secret_env", len(s.SecretEnv), maxSecretEnv)
	for i, e := range s.SecretEnv {
		f := field + ".secret_env[" + strconv.Itoa(i) + "]"
		v.envName(f+".name", e.Name)
		if v.length(f+".secret", e.Secret, 1, maxSecretLength) && !secretPathRE.MatchString(e.Secret) {
			v.add(f+".secret", e.Secret, "use a path of '/'-separated segments of letters, digits, '_', '.' and '-' (lab/db), without a leading or trailing '/'")
		}
		v.length(f+".key", e.Key, 1, maxSecretKeyLength)
	}
	v.count(field+".volumes", len(s.Volumes), maxVolumes)
	for i, vol := range s.Volumes {
		f := field + ".volumes[" + strconv.Itoa(i) + "]"
		v.absolute(f+".host_path", vol.HostPath)
		v.absolute(f+".container_path", vol.ContainerPath)
	}
	if s.RestartPolicy != "" && !slices.Contains(RestartPolicies(), s.RestartPolicy) {
		v.add(field+".restart_policy", string(s.RestartPolicy), `use one of "no", "always", "on-failure", "unless-stopped" (empty: "unless-stopped")`)
	}
	if s.Healthcheck != nil {
		v.healthcheck(field+".healthcheck", *s.Healthcheck)
	}
	if s.ImagePullSecret != "" && v.length(field+".image_pull_secret", s.ImagePullSecret, 1, maxPullSecretLength) && !nameRE.MatchString(s.ImagePullSecret) {
		v.add(field+".image_pull_secret", s.ImagePullSecret, "use letters, digits, '_', '.' and '-', starting with a letter or digit")
	}
}

func (v *validator) envName(field, name string) {
	if v.length(field, name, 1, maxEnvNameLength) && !envNameRE.MatchString(name) {
		v.add(field, name, "use a letter or '_' followed by letters, digits and '_'")
	}
}

func (v *validator) absolute(field, path string) {
	if v.length(field, path, 1, maxPathLength) && !strings.HasPrefix(path, "/") {
		v.add(field, path, "use an absolute path (starting with '/')")
	}
}
