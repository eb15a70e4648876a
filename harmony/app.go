package harmony

import "time"

// HarmonyApp is an application's stable build and deployment policy. An
// application repository implements it once, in its deployment package, and
// passes it to Main; a normal release changes nothing here and only supplies
// a new --tag. Its methods must return the same values on every call.
type HarmonyApp interface {
	// Images are the container images the application builds.
	Images() []Image
	// Contexts are the compiled deployment contexts (production, staging,
	// …): non-secret coordinates of the registry, cluster namespace,
	// OpenBao and Zitadel.
	Contexts() []Context
	// Deployment is the one Fleet Deployment every context receives.
	Deployment() Deployment
}

// Image is one image build.
type Image struct {
	// Name identifies the image in the manifest (Service.Image, --image)
	// and is its last repository path element:
	// <registry>/<repository>/<Name>.
	Name string
	// Context is the build context folder, relative to the directory
	// harmony runs in (the repository root in CI).
	Context string
	// Dockerfile is the Dockerfile (Containerfile) path, relative to the
	// directory harmony runs in. Default: <Context>/Dockerfile.
	Dockerfile string
}

// Context is one compiled deployment context. Every field is a non-secret
// coordinate; secrets come from OpenBao at run time (see docs/ci.md).
type Context struct {
	// Name selects the context: harmony ship --context <Name>.
	Name string
	// Namespace is the tenant namespace of the Fleet Deployment.
	Namespace string
	// Registry is the registry authority, host[:port]
	// ("hub.nationtech.io", "127.0.0.1:5000").
	Registry string
	// Repository is the path under the registry holding the application's
	// images ("example" gives hub.nationtech.io/example/<image>).
	Repository string
	// OpenBao says where the CI identity reads its credentials.
	OpenBao OpenBao
	// Zitadel is where the CI machine key is exchanged for an id_token.
	Zitadel Zitadel
	// Signing, when set, makes ship sign every image it pushes, through
	// OpenBao transit (Signing.TransitKey) or with the key file at
	// OpenBao.SigningKey, and gives the Deployment (ship's and
	// deploy's) the trust policy TrustedKeys: devices then run only
	// images one of them signed (ADR 0023, docs/ci.md). Nil: images are
	// neither signed nor checked.
	Signing *Signing
}

// Signing is a context's image signing (ADR 0023).
type Signing struct {
	// TrustedKeys are the public keys devices accept (the Deployment's
	// spec.signatures.keys, 1 to 8): the signing key's, and during a
	// rotation the other one. Public keys are not secrets; they are
	// compiled in like every coordinate, so a change of trust is a
	// reviewed commit. Empty: devices trust the signing key's public key
	// only, as harmony reads it from OpenBao (named
	// <context Name>-signing; fleet dev's dev context does this). With
	// TransitKey, empty means every version's public key of the transit
	// key (the newest 8, named <context Name>-signing-v<version>), so a
	// transit rotation is trusted by the next ship.
	TrustedKeys []TrustedKey
	// TransitKey names the OpenBao transit key (type ecdsa-p256, not
	// exportable, at OpenBao.TransitMount) ship signs with: the CI role
	// signs (update on transit/sign/<key>) and reads the public keys
	// (read on transit/keys/<key>) but never holds the private key. Empty:
	// the key file at OpenBao.SigningKey, for an OpenBao without transit.
	TransitKey string
}

// TrustedKey is one public key devices accept.
type TrustedKey struct {
	// Name identifies the key in a device's reasons: a DNS label.
	Name string
	// PublicKey is the PEM "PUBLIC KEY" block of an ECDSA P-256 key.
	PublicKey string
}

// OpenBao locates the tenant's OpenBao and the CI secrets in it.
type OpenBao struct {
	// URL of the OpenBao server ("https://bao.example.com").
	URL string
	// Role is the JWT auth role the CI identity logs in with.
	Role string
	// JWTMount is the JWT auth mount. Default "jwt".
	JWTMount string
	// KVMount is the KV version 2 mount. Default "secret".
	KVMount string
	// RegistryCredentials is the KV path (under KVMount) of the push
	// robot: JSON fields registry, username, password. Default
	// harmony/<Namespace>/<context Name>/RegistryCredentials.
	RegistryCredentials string
	// Kubeconfig is the KV path of the cluster access for Namespace: field
	// kubeconfig holds a kubeconfig document. Default
	// harmony/<Namespace>/<context Name>/kubeconfig.
	Kubeconfig string
	// SigningKey is the KV path of the image signing key, used when the
	// context sets Signing: field privateKey holds the encrypted sigstore
	// (cosign) private key PEM, passphrase its passphrase. Default
	// harmony/<Namespace>/<context Name>/signing-key. Unused when
	// Signing.TransitKey is set.
	SigningKey string
	// TransitMount is the transit secrets engine's mount, used when
	// Signing.TransitKey is set. Default "transit".
	TransitMount string
}

// Zitadel locates the identity provider.
type Zitadel struct {
	// URL is the issuer URL ("https://example.zitadel.cloud").
	URL string
	// ProjectID, when set, is requested as the id_token's audience (the
	// OpenBao role's bound_audiences).
	ProjectID string
}

// Deployment is the Fleet Deployment's stable policy.
type Deployment struct {
	// Name of the Fleet Deployment (a DNS label).
	Name string
	// AllowedGroups restricts targets to these device groups.
	AllowedGroups []string
	// Placement is the target selector: devices whose labels contain every
	// pair.
	Placement map[string]string
	// Init, when set, runs to completion before the services on every
	// device (restart policy always "no", no ports).
	Init *Service
	// Services are the long-running containers.
	Services []Service
	// Rollout, when set, releases the revision in batches with the
	// controls of ADR 0016; nil: the product's rollout.
	Rollout *Rollout
}

// Service is one container of the Deployment.
type Service struct {
	// Name of the container on the device.
	Name string
	// Image names one of the app's Images; ship and deploy pin it to a
	// digest (or, for deploy, an explicit dev-* tag).
	Image string
	// Ports published as "host:container", optionally with /tcp or /udp.
	Ports []string
	// Env are plain environment variables.
	Env []EnvVar
	// SecretEnv are environment variables resolved on the device from
	// application secrets in OpenBao.
	SecretEnv []SecretEnv
	// ImagePullSecret references the device pull credential
	// (<device-prefix>/registry/device-pull/<reference>) for a private
	// registry.
	ImagePullSecret string
	// Volumes bind host paths into the container.
	Volumes []Volume
	// RestartPolicy: no, always, on-failure or unless-stopped (the
	// default). Ignored for Init.
	RestartPolicy string
	// Healthcheck, when set, is run by Podman in the container; the device
	// reports the Deployment converged only once it passes. Not for Init.
	Healthcheck *Healthcheck
}

// Healthcheck is a service's health check (Podman's semantics).
type Healthcheck struct {
	// Command in exec form: the program and its arguments (a shell only
	// as the program: "/bin/sh", "-c", "…"). Exit code 0 is healthy.
	Command []string
	// Interval between checks (1s to 1h; 0: 30s), Timeout of one check
	// (1s to 10m; 0: 30s), StartPeriod after the start during which
	// failures do not count (0 to 1h).
	Interval, Timeout, StartPeriod time.Duration
	// Retries: failed checks in a row that make the service unhealthy (1
	// to 100; 0: 3).
	Retries int
}

// Rollout says how a revision is released (ADR 0016); the zero value is
// the product's rollout: canaries, then every target at once.
type Rollout struct {
	// Batches after the canary stage, in order.
	Batches []Batch
	// ManualApproval holds the rollout before each batch until someone
	// approves it (`fleet rollout approve`).
	ManualApproval bool
	// OnFailure: "" or "Fail" (the default), "Pause" or "Rollback".
	OnFailure string
	// DisruptionBudget, when set, limits how many targets sharing a label
	// value are between revisions at once.
	DisruptionBudget *DisruptionBudget
}

// Batch is one batch of a Rollout: exactly one of Count, Percent and
// Selector.
type Batch struct {
	Count    int
	Percent  int
	Selector map[string]string
	// SuccessThreshold is the percentage of the batch that must converge
	// (1 to 100; 0: 100).
	SuccessThreshold int
	// Soak is how long the threshold must hold (0: none; up to 24h).
	Soak time.Duration
}

// DisruptionBudget groups the targets by the value of LabelKey and lets at
// most MaxUnavailable (or MaxUnavailablePercent % of each group) be
// between revisions at once; exactly one of the two is set.
type DisruptionBudget struct {
	LabelKey              string
	MaxUnavailable        int
	MaxUnavailablePercent int
}

// EnvVar is a plain environment variable.
type EnvVar struct {
	// Name of the variable.
	Name string
	// Value of the variable; not a secret (use SecretEnv for those).
	Value string
}

// SecretEnv is an environment variable from an application secret: the
// value of Key in the secret at path Secret.
type SecretEnv struct {
	// Name of the variable.
	Name string
	// Secret is the secret's KV path in OpenBao.
	Secret string
	// Key is the field of the secret holding the value.
	Key string
}

// Volume binds a host path into the container.
type Volume struct {
	// HostPath is an absolute path on the device.
	HostPath string
	// ContainerPath is an absolute path in the container.
	ContainerPath string
	// ReadOnly mounts it read-only.
	ReadOnly bool
}
