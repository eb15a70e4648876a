package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

// Labels every container the agent creates carries. The agent never touches
// a container without LabelOwner = OwnerValue.
const (
	LabelOwner = "fleet.nationtech.io/owner"
	OwnerValue = "fleet-agent"
	// LabelDevice names the device whose agent owns the container: agents
	// of several devices may share one engine (fleet dev, tests), and none
	// touches another's containers.
	LabelDevice     = "fleet.nationtech.io/device"
	LabelNamespace  = "fleet.nationtech.io/namespace"
	LabelDeployment = "fleet.nationtech.io/deployment"
	LabelUID        = "fleet.nationtech.io/uid"
	LabelGeneration = "fleet.nationtech.io/generation"
	// LabelRevision holds the hash of the resolved score (never a value).
	LabelRevision = "fleet.nationtech.io/revision"
	// LabelRole is "init" or "service".
	LabelRole = "fleet.nationtech.io/role"
)

// DefaultStopTimeout is how long a container gets to stop before it is
// killed, on replacement and removal.
const DefaultStopTimeout = 30 * time.Second

// PullCredentials reads device pull secrets by reference.
type PullCredentials interface {
	// PullCredential returns the raw JSON of the pull secret of reference
	// (<device-prefix>/registry/device-pull/<reference>).
	PullCredential(ctx context.Context, reference string) ([]byte, error)
}

// Reconciler applies one Deployment's desired state to the runtime with the
// PodmanV0 semantics. It keeps no state: everything it needs is in the
// runtime's labels, so a restart rebuilds it.
type Reconciler struct {
	Runtime runtime.Runtime
	// Device is the id of the device this reconciler acts for; it is part
	// of ownership (LabelDevice).
	Device string
	// Secrets resolves secret_env references; nil: none configured.
	Secrets Secrets
	// Credentials reads pull secrets; nil: none configured.
	Credentials PullCredentials
	Log         *slog.Logger
	// StopTimeout defaults to DefaultStopTimeout.
	StopTimeout time.Duration
	// EnsureHostPath, when set, is called in preflight for every volume's
	// host path (Podman refuses a bind mount whose source does not exist;
	// the agent's command creates the folder). Nil: not checked.
	EnsureHostPath func(path string) error
	// Pins keep the secret values each revision was first resolved with
	// (the agent does not watch the secret source). Run sets a fresh one
	// when it is nil; nil in a Reconciler used alone: every Apply reads
	// the source.
	Pins *SecretPins
	// Metrics, when set, count failed engine calls, image pulls and
	// unresolved secret references. Run sets the agent's (Options.Metrics)
	// when it is nil.
	Metrics *Metrics
}

// PreflightError: the desired state cannot be applied; nothing was changed.
type PreflightError struct {
	Reason string
	// Err is the cause when there is one (runtime.ErrAuth for a refused
	// pull, for example).
	Err error
}

func (e *PreflightError) Error() string { return "preflight: " + e.Reason }

// Unwrap returns the cause.
func (e *PreflightError) Unwrap() error { return e.Err }

// InitFailedError: the init container exited non-zero; services were left
// untouched. The next pass retries.
type InitFailedError struct {
	Name     string
	ExitCode int
}

func (e *InitFailedError) Error() string {
	return fmt.Sprintf("init container %s exited with code %d", e.Name, e.ExitCode)
}

func (r *Reconciler) stopTimeout() time.Duration {
	if r.StopTimeout > 0 {
		return r.StopTimeout
	}
	return DefaultStopTimeout
}

// rt is the runtime, its failed calls counted when Metrics are set.
func (r *Reconciler) rt() runtime.Runtime {
	if r.Metrics == nil {
		return r.Runtime
	}
	return countedRuntime{rt: r.Runtime, m: r.Metrics}
}

// secrets is the secret source (nil when none), its failures counted when
// Metrics are set.
func (r *Reconciler) secrets() Secrets {
	if r.Secrets == nil || r.Metrics == nil {
		return r.Secrets
	}
	return countedSecrets{s: r.Secrets, m: r.Metrics}
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// owns reports whether c belongs to this device's Deployment (namespace,
// name).
func (r *Reconciler) owns(c runtime.Container, namespace, name string) bool {
	return r.ownsAny(c) && c.Labels[LabelNamespace] == namespace && c.Labels[LabelDeployment] == name
}

// ownsAny reports whether c was created by this device's agent.
func (r *Reconciler) ownsAny(c runtime.Container) bool {
	return c.Labels[LabelOwner] == OwnerValue && c.Labels[LabelDevice] == r.Device
}

// Apply converges the runtime on one intent entry: preflight (names, ports,
// ownership, images) before any change, then the init container, then the
// services, then removal of the Deployment's containers the score no longer
// has. It returns a *PreflightError when nothing could be done, an
// *InitFailedError when the init container failed (services untouched). A
// transient failure of the secret source (secret_env values, pull
// secrets) is an *UnavailableError in the chain (AsUnavailable): the
// Deployment waits and the pass is retried.
func (r *Reconciler) Apply(ctx context.Context, e events.IntentEntry) error {
	s, err := score.Parse(e.Score)
	if err != nil {
		return &PreflightError{Reason: err.Error()}
	}
	res, err := resolve(ctx, s, r.secretsFor(e))
	if err != nil {
		return &PreflightError{Reason: err.Error(), Err: err}
	}
	all, mine, err := r.containers(ctx, e.Namespace, e.Name)
	if err != nil {
		return err
	}
	if err := r.preflight(ctx, e, res, all, mine); err != nil {
		return err
	}
	if err := r.runInit(ctx, e, res, mine); err != nil {
		return err
	}
	if err := r.applyServices(ctx, e, res, mine); err != nil {
		return err
	}
	return r.removeStale(ctx, res, mine)
}

// containers lists every container of the runtime, and those of this
// device's Deployment (namespace, name) by name.
func (r *Reconciler) containers(ctx context.Context, namespace, name string) ([]runtime.Container, map[string]runtime.Container, error) {
	all, err := r.rt().List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("list containers: %w", err)
	}
	mine := map[string]runtime.Container{}
	for _, c := range all {
		if r.owns(c, namespace, name) {
			mine[c.Name] = c
		}
	}
	return all, mine, nil
}

// labels are the labels of a container of role ("init" or "service") of
// entry e at resolved revision.
func (r *Reconciler) labels(e events.IntentEntry, revision, role string) map[string]string {
	return map[string]string{LabelOwner: OwnerValue, LabelDevice: r.Device, LabelNamespace: e.Namespace, LabelDeployment: e.Name,
		LabelUID: e.UID, LabelGeneration: strconv.FormatInt(e.Generation, 10), LabelRevision: revision, LabelRole: role}
}

// runInit runs the init container to completion, unless it already
// completed at this revision (replacing one of another revision). An
// *InitFailedError when it exits non-zero.
func (r *Reconciler) runInit(ctx context.Context, e events.IntentEntry, res resolved, mine map[string]runtime.Container) error {
	ic := res.init
	if ic == nil {
		return nil
	}
	cur, exists := mine[ic.Name]
	if exists && cur.Labels[LabelRevision] == res.revision && cur.State == runtime.StateExited && cur.ExitCode == 0 {
		return nil // done
	}
	if exists {
		if err := r.stopRemove(ctx, cur); err != nil {
			return err
		}
	}
	spec := containerSpec(*ic, r.labels(e, res.revision, "init"))
	spec.RestartPolicy = runtime.RestartNo // always, whatever the score says
	spec.Ports = nil
	id, err := r.rt().Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("create init container %s: %w", ic.Name, err)
	}
	if err := r.rt().Start(ctx, id); err != nil {
		return fmt.Errorf("start init container %s: %w", ic.Name, err)
	}
	code, err := r.rt().Wait(ctx, id)
	if err != nil {
		return fmt.Errorf("wait for init container %s: %w", ic.Name, err)
	}
	if code != 0 {
		return &InitFailedError{Name: ic.Name, ExitCode: code}
	}
	r.log().InfoContext(ctx, "init container completed", "deployment", e.Namespace+"/"+e.Name, "container", ic.Name)
	return nil
}

// applyServices converges every service in turn.
func (r *Reconciler) applyServices(ctx context.Context, e events.IntentEntry, res resolved, mine map[string]runtime.Container) error {
	for _, svc := range res.services {
		if err := r.applyService(ctx, e, res.revision, svc, mine); err != nil {
			return err
		}
	}
	return nil
}

// applyService leaves a service container of this revision as it is
// (starting it if it was created but never started), and replaces one of
// another revision or creates a missing one.
func (r *Reconciler) applyService(ctx context.Context, e events.IntentEntry, revision string, svc resolvedService, mine map[string]runtime.Container) error {
	cur, exists := mine[svc.Name]
	if exists && cur.Labels[LabelRevision] == revision {
		if cur.State == runtime.StateCreated { // created but never started (a crash mid-pass)
			if err := r.rt().Start(ctx, cur.ID); err != nil {
				return fmt.Errorf("start service %s: %w", svc.Name, err)
			}
		}
		return nil // running or stopped by its own restart policy: leave it
	}
	if exists {
		if err := r.stopRemove(ctx, cur); err != nil {
			return err
		}
	}
	id, err := r.rt().Create(ctx, containerSpec(svc, r.labels(e, revision, "service")))
	if err != nil {
		return fmt.Errorf("create service %s: %w", svc.Name, err)
	}
	if err := r.rt().Start(ctx, id); err != nil {
		return fmt.Errorf("start service %s: %w", svc.Name, err)
	}
	r.log().InfoContext(ctx, "service started", "deployment", e.Namespace+"/"+e.Name, "container", svc.Name)
	return nil
}

// removeStale removes the Deployment's containers the score no longer has.
func (r *Reconciler) removeStale(ctx context.Context, res resolved, mine map[string]runtime.Container) error {
	wanted := map[string]bool{}
	if res.init != nil {
		wanted[res.init.Name] = true
	}
	for _, svc := range res.services {
		wanted[svc.Name] = true
	}
	for name, c := range mine {
		if !wanted[name] {
			if err := r.stopRemove(ctx, c); err != nil {
				return err
			}
		}
	}
	return nil
}

// preflight checks names, ports, ownership and images before any change.
func (r *Reconciler) preflight(ctx context.Context, e events.IntentEntry, res resolved, all []runtime.Container, mine map[string]runtime.Container) error {
	var svcs []resolvedService
	if res.init != nil {
		svcs = append(svcs, *res.init)
	}
	svcs = append(svcs, res.services...)
	if problems := conflicts(svcs, all, mine); len(problems) > 0 {
		return &PreflightError{Reason: strings.Join(problems, "; ")}
	}
	if err := r.ensureHostPaths(svcs); err != nil {
		return err
	}
	return r.ensureImages(ctx, svcs)
}

// conflicts lists what forbids creating svcs: a name taken by a container
// the Deployment does not own, a bad or twice-published host port, a host
// port another running container publishes.
func conflicts(svcs []resolvedService, all []runtime.Container, mine map[string]runtime.Container) []string {
	byName := map[string]runtime.Container{}
	for _, c := range all {
		byName[c.Name] = c
	}
	var problems []string
	hostPorts := map[string]string{} // "proto/port" → service
	for _, s := range svcs {
		if c, ok := byName[s.Name]; ok {
			if _, ours := mine[s.Name]; !ours {
				problems = append(problems, fmt.Sprintf("container name %q is taken by a container this Deployment does not own (%s)", s.Name, owner(c)))
			}
		}
		ports, err := portBindings(s.Ports)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", s.Name, err))
		}
		for _, p := range ports {
			k := p.Protocol + "/" + strconv.Itoa(int(p.HostPort))
			if other, dup := hostPorts[k]; dup {
				problems = append(problems, fmt.Sprintf("host port %s is published by both %s and %s", k, other, s.Name))
			}
			hostPorts[k] = s.Name
		}
	}
	for _, c := range all {
		if _, ours := mine[c.Name]; ours || c.State == runtime.StateExited {
			continue
		}
		for _, p := range c.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = "tcp"
			}
			k := proto + "/" + strconv.Itoa(int(p.HostPort))
			if svc, clash := hostPorts[k]; clash {
				problems = append(problems, fmt.Sprintf("host port %s wanted by %s is used by container %q (%s)", k, svc, c.Name, owner(c)))
			}
		}
	}
	return problems
}

// ensureHostPaths makes sure every volume's host path exists, when
// EnsureHostPath is set.
func (r *Reconciler) ensureHostPaths(svcs []resolvedService) error {
	if r.EnsureHostPath == nil {
		return nil
	}
	for _, s := range svcs {
		for _, v := range s.Volumes {
			if err := r.EnsureHostPath(v.HostPath); err != nil {
				return &PreflightError{Reason: fmt.Sprintf("%s: volume host_path %s: %v", s.Name, v.HostPath, err), Err: err}
			}
		}
	}
	return nil
}

// ensureImages pulls every missing image, once per image.
func (r *Reconciler) ensureImages(ctx context.Context, svcs []resolvedService) error {
	seen := map[string]bool{}
	for _, s := range svcs {
		if seen[s.Image] {
			continue
		}
		seen[s.Image] = true
		if err := r.ensureImage(ctx, s.Service); err != nil {
			return &PreflightError{Reason: err.Error(), Err: err}
		}
	}
	return nil
}

func owner(c runtime.Container) string {
	if c.Labels[LabelOwner] == OwnerValue {
		return "Fleet Deployment " + c.Labels[LabelNamespace] + "/" + c.Labels[LabelDeployment] + " of device " + c.Labels[LabelDevice]
	}
	return "not managed by Fleet"
}

// ensureImage pulls a missing image; credentials only when a pull is needed,
// only through the per-call registry auth, only for the matching authority.
func (r *Reconciler) ensureImage(ctx context.Context, s score.Service) error {
	ok, err := r.rt().ImageExists(ctx, s.Image)
	if err != nil {
		return fmt.Errorf("image %s: %w", s.Image, err)
	}
	if ok {
		return nil
	}
	var auth *runtime.RegistryAuth
	if s.ImagePullSecret != "" {
		if r.Credentials == nil {
			return fmt.Errorf("image %s needs pull secret %s but no secret source is configured", s.Image, s.ImagePullSecret)
		}
		raw, err := r.Credentials.PullCredential(ctx, s.ImagePullSecret)
		if err != nil {
			r.Metrics.secretFailed(ctx)
			return fmt.Errorf("pull secret %s: %w", s.ImagePullSecret, secretSourceErr(err))
		}
		cred, err := ParsePullCredential(raw)
		if err != nil {
			return fmt.Errorf("pull secret %s: %w", s.ImagePullSecret, err)
		}
		if got, want := ImageAuthority(s.Image), NormaliseAuthority(cred.Registry); got != want {
			return fmt.Errorf("pull secret %s is for registry %s, but image %s is on %s: refusing to send the credential", s.ImagePullSecret, want, s.Image, got)
		}
		auth = &runtime.RegistryAuth{Username: cred.Username, Password: cred.Password}
	}
	if err := r.rt().Pull(ctx, s.Image, auth); err != nil {
		return fmt.Errorf("pull %s: %w", s.Image, err)
	}
	return nil
}

// stopRemove stops a container with the stop timeout, then force-removes
// it.
func (r *Reconciler) stopRemove(ctx context.Context, c runtime.Container) error {
	if c.State == runtime.StateRunning {
		if err := r.rt().Stop(ctx, c.ID, r.stopTimeout()); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			r.log().WarnContext(ctx, "stop failed, removing by force", "container", c.Name, "error", err)
		}
	}
	if err := r.rt().Remove(ctx, c.ID, true); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("remove %s: %w", c.Name, err)
	}
	return nil
}

// Remove deletes every container of the Deployment (init container and
// services), and nothing else.
func (r *Reconciler) Remove(ctx context.Context, namespace, name string) error {
	all, err := r.rt().List(ctx)
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range all {
		if r.owns(c, namespace, name) {
			errs = append(errs, r.stopRemove(ctx, c))
		}
	}
	return errors.Join(errs...)
}

// Deployments lists the (namespace, name) pairs that have containers on
// this device, from the ownership labels: after a restart the agent knows
// what to remove without any local state.
func (r *Reconciler) Deployments(ctx context.Context) ([][2]string, error) {
	all, err := r.rt().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, c := range all {
		if !r.ownsAny(c) {
			continue
		}
		k := [2]string{c.Labels[LabelNamespace], c.Labels[LabelDeployment]}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out, nil
}

func containerSpec(s resolvedService, labels map[string]string) runtime.ContainerSpec {
	env := make(map[string]string, len(s.env))
	for _, e := range s.env {
		env[e.Name] = e.Value
	}
	ports, _ := portBindings(s.Ports) // checked in preflight
	spec := runtime.ContainerSpec{Name: s.Name, Image: s.Image, Env: env, Ports: ports, Labels: labels,
		RestartPolicy: string(s.RestartPolicy)}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = runtime.RestartUnlessStopped
	}
	for _, v := range s.Volumes {
		spec.Mounts = append(spec.Mounts, runtime.Mount{HostPath: v.HostPath, ContainerPath: v.ContainerPath, ReadOnly: v.ReadOnly})
	}
	return spec
}

// portBindings parses the score's port mappings (score.ParsePorts) into
// the runtime's bindings.
func portBindings(ports []string) ([]runtime.PortBinding, error) {
	parsed, err := score.ParsePorts(ports)
	if err != nil {
		return nil, err
	}
	var out []runtime.PortBinding
	for _, p := range parsed {
		out = append(out, runtime.PortBinding{HostPort: p.Host, ContainerPort: p.Container, Protocol: string(p.Protocol)})
	}
	return out, nil
}
