package score

// These types are also the Deployment CRD's spec.score (see the package
// doc): their markers are the API server's validation and their doc
// comments the CRD's field descriptions.

// Type names a workload contract.
// +kubebuilder:validation:Enum=PodmanV0
type Type string

// TypePodmanV0 is the only workload contract: one optional init container
// followed by one or more long-running services.
const TypePodmanV0 Type = "PodmanV0"

// Score is a typed workload definition, as it appears in a Deployment's
// spec.score, in intent events and in a device's fleet-intent value.
type Score struct {
	// Type of the score; only PodmanV0 is supported.
	Type Type `json:"type"`
	// Data is the PodmanV0 definition.
	Data PodmanV0 `json:"data"`
}

// PodmanV0 is one optional init container followed by services.
//
// The services publish at most 256 ports together, and no host port twice
// with one protocol (a port without one is tcp). The check compares every
// pair, so its CEL cost grows with the square of the ports: the total bound
// keeps it within the API server's per-rule budget, and the rule skips the
// comparison (the bound's rule refuses) above it. A port's key is an int,
// host port * 2 + 1 for udp, so that leading zeros do not count and no
// string is built. flatten and distinct are
// CEL list functions of Kubernetes 1.34, accepted by API servers from 1.35.
//
// +kubebuilder:validation:XValidation:rule="self.services.map(s, has(s.ports) ? size(s.ports) : 0).sum() <= 256",message="services[].ports: the services publish more than 256 ports in all: use at most 256 across all services"
// +kubebuilder:validation:XValidation:rule="size(self.services.map(s, has(s.ports) ? s.ports.map(p, int(p.split(':')[0]) * 2 + (p.endsWith('/udp') ? 1 : 0)) : []).flatten()) > 256 || size(self.services.map(s, has(s.ports) ? s.ports.map(p, int(p.split(':')[0]) * 2 + (p.endsWith('/udp') ? 1 : 0)) : []).flatten().distinct()) == size(self.services.map(s, has(s.ports) ? s.ports.map(p, int(p.split(':')[0]) * 2 + (p.endsWith('/udp') ? 1 : 0)) : []).flatten())",message="services[].ports: a host port is published twice with one protocol (in one service or in two; a port without /udp is tcp): publish each host port once per protocol, or give one of them another host port"
// +kubebuilder:validation:XValidation:rule="!has(self.init_container) || !has(self.init_container.ports) || size(self.init_container.ports) == 0",message="init_container.ports must be empty: an init container cannot publish host ports"
// +kubebuilder:validation:XValidation:rule="!has(self.init_container) || !has(self.init_container.healthcheck)",message="init_container.healthcheck must be empty: an init container runs to completion and its exit code is its result; put the health check on a service"
// +kubebuilder:validation:XValidation:rule="self.services.all(s, self.services.exists_one(o, o.name == s.name))",message="services[].name must be unique"
// +kubebuilder:validation:XValidation:rule="!has(self.init_container) || self.services.all(s, s.name != self.init_container.name)",message="init_container.name must differ from every services[].name"
type PodmanV0 struct {
	// InitContainer runs to completion before the services; its restart
	// policy is always forced to "no" and its ports must be empty.
	// +optional
	InitContainer *Service `json:"init_container,omitempty"`
	// Services are the long-running containers.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Services []Service `json:"services"`
}

// RestartPolicy is a Podman restart policy.
// +kubebuilder:validation:Enum=no;always;on-failure;unless-stopped
type RestartPolicy string

// Restart policies. The empty policy means RestartUnlessStopped (the CRD's
// default).
const (
	RestartNo            RestartPolicy = "no"
	RestartAlways        RestartPolicy = "always"
	RestartOnFailure     RestartPolicy = "on-failure"
	RestartUnlessStopped RestartPolicy = "unless-stopped"
)

// RestartPolicies lists every valid restart policy.
func RestartPolicies() []RestartPolicy {
	return []RestartPolicy{RestartNo, RestartAlways, RestartOnFailure, RestartUnlessStopped}
}

// Service is one container.
type Service struct {
	// The field order, names and omitempty options are part of the
	// contract beyond JSON decoding: the agent hashes the JSON of a
	// resolved service into every container's revision label, so changing
	// them would make an upgraded agent replace every container it runs (a
	// test in package agent pins the hash). A nil Healthcheck leaves the
	// hash of a service that sets none as it was.

	// Name of the container on the device.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`
	Name string `json:"name"`
	// Image reference with a digest (repo@sha256:…) or an explicit tag
	// (repo:tag).
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="self.matches('^[^@\\\\s]+@sha256:[a-f0-9]{64}$') || self.matches('^[^@\\\\s]+:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(@sha256:[a-f0-9]{64})?$')",messageExpression="'image \"' + (self.size() > 100 ? self.substring(0, 100) + '…' : self) + '\"' + (self.contains(' ') ? ' contains a space;' : '') + (self.matches('^([^@:/]*(:[0-9]+)?/)?[^@:]*[A-Z]') ? ' has capitals (the repository must be lowercase);' : '') + (self.contains('::') ? ' has an empty part (\"::\");' : '') + (!self.contains('@') && !self.matches(':[^/]*$') ? ' has no tag or digest;' : '') + ' it must name a digest (repo@sha256:<64 hex>) or an explicit tag (repo:tag)'"
	Image string `json:"image"`
	// Ports published as "host:container", optionally with /tcp or /udp.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=17
	// +kubebuilder:validation:items:Pattern=`^[0-9]{1,5}:[0-9]{1,5}(/(tcp|udp))?$`
	// +kubebuilder:validation:items:XValidation:rule="int(self.split(':')[0]) >= 1 && int(self.split(':')[0]) <= 65535 && int(self.split(':')[1].split('/')[0]) >= 1 && int(self.split(':')[1].split('/')[0]) <= 65535",messageExpression="(int(self.split(':')[0]) < 1 || int(self.split(':')[0]) > 65535 ? 'host port ' + self.split(':')[0] : 'container port ' + self.split(':')[1].split('/')[0]) + ' of \"' + self + '\" is outside 1..65535: use host:container with both numbers in 1..65535, optionally /tcp or /udp'"
	Ports []string `json:"ports,omitempty"`
	// Env sets plain environment variables.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	Env []EnvVar `json:"env,omitempty"`
	// SecretEnv sets environment variables from secret references, resolved
	// on the device; values never enter the Deployment, events or KV.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	SecretEnv []SecretEnv `json:"secret_env,omitempty"`
	// Volumes bind host paths into the container.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Volumes []Volume `json:"volumes,omitempty"`
	// RestartPolicy of the container; for init_container it is always
	// overridden to "no".
	// +optional
	// +kubebuilder:default=unless-stopped
	RestartPolicy RestartPolicy `json:"restart_policy,omitempty"`
	// ImagePullSecret references the device pull credential
	// (<device-prefix>/registry/device-pull/<reference>) read only when the
	// image must be pulled.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`
	ImagePullSecret string `json:"image_pull_secret,omitempty"`
	// Healthcheck is the check Podman runs in the container; the device
	// reports the revision Converged only once it passes, and Failed once
	// the container is unhealthy. Not allowed on init_container.
	// +optional
	Healthcheck *Healthcheck `json:"healthcheck,omitempty"`
}

// Healthcheck is the command Podman runs in a service's container to tell
// whether the service works, and its timing. Podman's rules decide the
// container's health: "starting" until a check passes ("healthy"), and
// "unhealthy" once Retries checks in a row fail after StartPeriod (a
// failure within the start period does not count).
//
// The durations are Go duration strings ("10s", "1m30s", "500ms" parts
// allowed; units ns, us, ms, s, m, h); an empty one, or Retries 0, means
// the default (see Healthcheck.Settings).
type Healthcheck struct {
	// Command is run in the container in exec form: the program, then its
	// arguments (for a shell: ["/bin/sh", "-c", "..."]). Exit code 0 is
	// healthy.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || size(self[0]) > 0",message="healthcheck.command[0] must not be empty: it is the program to run"
	// +kubebuilder:validation:XValidation:rule="size(self) == 0 || !(self[0] in ['CMD', 'CMD-SHELL', 'NONE'])",message="healthcheck.command is the exec form itself: drop Docker's leading CMD, CMD-SHELL or NONE (for a shell, start with /bin/sh and -c)"
	// +listType=atomic
	Command []string `json:"command"`
	// Interval between two checks, 1s to 1h; default 30s.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('1h'))",message="healthcheck.interval must be a duration from 1s to 1h"
	Interval string `json:"interval,omitempty"`
	// Timeout of one check, after which it counts as failed, 1s to 10m;
	// default 30s.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('10m'))",message="healthcheck.timeout must be a duration from 1s to 10m"
	Timeout string `json:"timeout,omitempty"`
	// StartPeriod after the container starts during which failed checks
	// do not count, 0s to 1h; default 0s.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self) <= duration('1h')",message="healthcheck.start_period must be a duration from 0s to 1h"
	StartPeriod string `json:"start_period,omitempty"`
	// Retries is how many failed checks in a row make the container
	// unhealthy, 1 to 100; default 3.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Retries int32 `json:"retries,omitempty"`
}

// EnvVar is a plain environment variable.
type EnvVar struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value"`
}

// SecretEnv is an environment variable whose value comes from a secret.
type SecretEnv struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Secret is the path of the secret in the secret store.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*$`
	Secret string `json:"secret"`
	// Key within the secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// Volume binds a host path into the container.
type Volume struct {
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=4096
	HostPath string `json:"host_path"`
	// +kubebuilder:validation:Pattern=`^/`
	// +kubebuilder:validation:MaxLength=4096
	ContainerPath string `json:"container_path"`
	// +optional
	ReadOnly bool `json:"read_only,omitempty"`
}
