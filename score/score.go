package score

// Type names a workload contract.
type Type string

// TypePodmanV0 is the only workload contract: one optional init container
// followed by one or more long-running services.
const TypePodmanV0 Type = "PodmanV0"

// Score is a typed workload definition, as it appears in a Deployment's
// spec.score, in intent events and in a device's fleet-intent value.
type Score struct {
	// Type of the score; only TypePodmanV0 exists.
	Type Type `json:"type"`
	// Data is the PodmanV0 definition.
	Data PodmanV0 `json:"data"`
}

// PodmanV0 is one optional init container followed by services.
type PodmanV0 struct {
	// InitContainer runs to completion before the services; the agent
	// always runs it with restart policy "no", and its ports must be empty.
	InitContainer *Service `json:"init_container,omitempty"`
	// Services are the long-running containers: 1 to 32, unique names.
	Services []Service `json:"services"`
}

// RestartPolicy is a Podman restart policy.
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
//
// The field order, names and omitempty options are part of the contract
// beyond JSON decoding: the agent hashes the JSON of a resolved service into
// every container's revision label, so changing them would make an upgraded
// agent replace every container it runs (a test in package agent pins the
// hash).
type Service struct {
	// Name of the container on the device: 1 to 63 letters, digits, '_',
	// '.' and '-', starting with a letter or digit.
	Name string `json:"name"`
	// Image is a reference with a digest (repo@sha256:<64 hex>) or an
	// explicit tag (repo:tag, optionally followed by a digest).
	Image string `json:"image"`
	// Ports are published as "host:container", optionally with /tcp or
	// /udp; see ParsePort.
	Ports []string `json:"ports,omitempty"`
	// Env sets plain environment variables.
	Env []EnvVar `json:"env,omitempty"`
	// SecretEnv sets environment variables from secret references, resolved
	// on the device; values never enter the score.
	SecretEnv []SecretEnv `json:"secret_env,omitempty"`
	// Volumes bind host paths into the container.
	Volumes []Volume `json:"volumes,omitempty"`
	// RestartPolicy of the container; empty means RestartUnlessStopped.
	RestartPolicy RestartPolicy `json:"restart_policy,omitempty"`
	// ImagePullSecret references the device pull credential, read only
	// when the image must be pulled.
	ImagePullSecret string `json:"image_pull_secret,omitempty"`
	// Healthcheck, when set, is the check Podman runs in the container;
	// the agent reports the revision converged only once it passes. Not
	// allowed on the init container. Nil: no check (and no change to the
	// revision hash of a score that sets none).
	Healthcheck *Healthcheck `json:"healthcheck,omitempty"`
}

// Healthcheck is the command Podman runs in a service's container to tell
// whether the service works, and its timing. Podman's rules decide the
// container's health: "starting" until a check passes ("healthy"), and
// "unhealthy" once Retries checks in a row fail after StartPeriod (a
// failure within the start period does not count).
//
// The durations are Go duration strings ("10s", "1m30s", "500ms" parts
// allowed); an empty one, or Retries 0, means the default (see
// Healthcheck.Settings).
type Healthcheck struct {
	// Command is run in the container in exec form: the program, then its
	// arguments; no shell unless it is the program (["/bin/sh", "-c",
	// "…"]). Exit code 0 means healthy. 1 to 64 entries, the first not
	// empty.
	Command []string `json:"command"`
	// Interval between two checks: 1s to 1h; empty: 30s.
	Interval string `json:"interval,omitempty"`
	// Timeout of one check, after which it counts as failed: 1s to 10m;
	// empty: 30s.
	Timeout string `json:"timeout,omitempty"`
	// StartPeriod after the container starts during which failed checks
	// do not count: 0s to 1h; empty: 0s.
	StartPeriod string `json:"start_period,omitempty"`
	// Retries is how many failed checks in a row make the container
	// unhealthy: 1 to 100; 0: 3.
	Retries int32 `json:"retries,omitempty"`
}

// EnvVar is a plain environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SecretEnv is an environment variable whose value is resolved from a
// secret reference on the device.
type SecretEnv struct {
	Name string `json:"name"`
	// Secret is the path of the secret in the secret store.
	Secret string `json:"secret"`
	// Key within the secret.
	Key string `json:"key"`
}

// Volume binds a host path into the container.
type Volume struct {
	HostPath      string `json:"host_path"`
	ContainerPath string `json:"container_path"`
	ReadOnly      bool   `json:"read_only,omitempty"`
}
