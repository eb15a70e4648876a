package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// LabelRestartPolicy is the restart policy a service was created with,
	// so that Restore can bring services back without the score (an agent
	// that boots offline).
	LabelRestartPolicy = "fleet.nationtech.io/restart-policy"
)

// DefaultStopTimeout is how long a container gets to stop before it is
// killed, on replacement and removal.
const DefaultStopTimeout = 30 * time.Second

// DefaultInitTimeout is how long an init container may run, counted from its
// start, before the agent stops and removes it (Reconciler.InitTimeout).
const DefaultInitTimeout = 10 * time.Minute

// PullCredentials reads device pull secrets by reference.
type PullCredentials interface {
	// PullCredential returns the raw JSON of the pull secret of reference
	// (<device-prefix>/registry/device-pull/<reference>).
	PullCredential(ctx context.Context, reference string) ([]byte, error)
}

// Reconciler applies one Deployment's desired state to the runtime with the
// PodmanV0 semantics. It keeps no state of its own: everything it needs is
// in the runtime's labels, so a restart rebuilds it; the secret pins and
// the pull backoff it is given, and the stops it expects (for the
// monitor), live in memory and start empty.
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
	// PullBackoff holds back the pull of an image whose last pull failed
	// (see PullBackoff). Run sets a fresh one when it is nil; nil in a
	// Reconciler used alone: every Apply pulls a missing image.
	PullBackoff *PullBackoff
	// Metrics, when set, count failed engine calls, image pulls and
	// unresolved secret references. Run sets the agent's (Options.Metrics)
	// when it is nil.
	Metrics *Metrics
	// InitTimeout bounds an init container's run, counted from its start
	// (the runtime's Container.StartedAt; from the pass that finds it
	// running when the runtime does not say). One running past it is
	// stopped and removed and Apply returns an *InitTimeoutError. 0 means
	// DefaultInitTimeout.
	InitTimeout time.Duration
	// PortInUse, when set, is asked in preflight whether a process that is
	// not a container listens on a wanted host port (proto "tcp" or
	// "udp"); HostPortInUse is the host's. It is asked only for ports no
	// running container publishes: rootless Podman's port forwarder
	// listens for the running containers. Nil: not checked (the start of
	// the service fails instead, after its old container was replaced).
	PortInUse func(proto string, port uint16) (bool, error)
	// Verifier checks the images of a revision with a signature policy
	// (events.IntentEntry.Signatures, ADR 0023) in preflight, before any
	// container changes. Run sets an *imagesig.Verifier when it is nil;
	// nil in a Reconciler used alone: such a revision fails preflight.
	// A revision without a policy never uses it.
	Verifier ImageVerifier
	// ImageStore, when set, is asked in preflight, before any pull, for
	// the image store's free space and the layers it lacks (the disk
	// preflight, checkImageStore, ADR 0028). Nil: no disk preflight.
	ImageStore runtime.ImageStore
	// ImageStoreMargin is the space the disk preflight keeps free after
	// the pulls; 0 means DefaultImageStoreMargin, below zero none.
	ImageStoreMargin int64
	// Pruner, when set, removes after a pass that converged the images of
	// the revisions the Deployment no longer keeps (prune, ADR 0028).
	// Nil: images are never removed.
	Pruner runtime.ImagePruner
	// KeepRevisions is how many revisions of each Deployment keep their
	// images (the current one included); 0 means DefaultKeepRevisions.
	KeepRevisions int

	// expectStop holds the containers stopRemove stops: the monitor does
	// not count their deaths.
	expectStop expectedStops
	// history holds the images of each Deployment's last revisions (prune).
	history imageHistory
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

// InitTimeoutError: the init container ran longer than Reconciler.InitTimeout
// and was stopped and removed; services were left untouched. The next pass
// runs it again.
type InitTimeoutError struct {
	Name    string
	Timeout time.Duration
}

func (e *InitTimeoutError) Error() string {
	return fmt.Sprintf("init container %s still ran after %s, the agent's init timeout, and was stopped and removed: "+
		"make it finish sooner (an init container must exit) or raise the agent's init timeout", e.Name, e.Timeout)
}

// ServiceDownError: after the pass a service of the current revision is
// exited and its restart policy keeps it down (policy "no", or
// "on-failure" after an exit with code 0 the engine saw). Services are long-running; one-shot
// work belongs in init_container.
type ServiceDownError struct {
	Name          string
	ExitCode      int
	RestartPolicy string
}

func (e *ServiceDownError) Error() string {
	return fmt.Sprintf("service %s is down: it exited with code %d and its restart_policy %q keeps it down; "+
		"services are long-running: set restart_policy to unless-stopped or always, or move one-shot work to init_container",
		e.Name, e.ExitCode, e.RestartPolicy)
}

func (r *Reconciler) initTimeout() time.Duration {
	if r.InitTimeout > 0 {
		return r.InitTimeout
	}
	return DefaultInitTimeout
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
// has, then the health gate (awaitHealthy): it returns only once every
// service with a health check is healthy. It returns a *PreflightError
// when nothing could be done, an *InitFailedError or *InitTimeoutError
// when the init container failed (services untouched), a
// *ServiceDownError when a service is exited after the pass and its
// restart policy keeps it down, an *UnhealthyError when a service's health
// check made it unhealthy (a *HealthTimeoutError when its health never
// settled). A transient failure of
// the secret source (secret_env values, pull secrets) or of a registry
// (runtime.ErrRegistryUnavailable) is an *UnavailableError in the chain
// (AsUnavailable): the Deployment waits and the pass is retried.
//
// A service is stopped before its successor starts only when the
// successor needs its name or one of its host ports, so a renamed service
// or a host port moving between services converges in one pass, and a
// service whose ports do not move stays up until its own turn.
//
// Apply may be cancelled at any point (ctx): what it leaves — a container
// created but not started, an old container stopped but not removed, an
// init container still running — is what the next pass repairs, and an
// init container of the same revision still running is waited for again,
// not restarted.
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
	before := imagesOf(mine)
	if err := r.preflight(ctx, e, &res, all, mine); err != nil {
		return err
	}
	if err := r.runInit(ctx, e, res, mine); err != nil {
		return err
	}
	if err := r.applyServices(ctx, e, res, mine); err != nil {
		return err
	}
	if err := r.removeStale(ctx, res, mine); err != nil {
		return err
	}
	if err := r.checkServicesUp(ctx, e, res); err != nil {
		return err
	}
	if err := r.awaitHealthy(ctx, e, res); err != nil {
		return err
	}
	r.prune(ctx, e, res, before)
	return nil
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
// completed at this revision (replacing one of another revision). One of
// this revision found running (a cancelled pass, a killed agent) is waited
// for, within the bound left since it started; one found created is
// started. An *InitFailedError when it exits non-zero, an
// *InitTimeoutError when it outlives the bound.
func (r *Reconciler) runInit(ctx context.Context, e events.IntentEntry, res resolved, mine map[string]runtime.Container) error {
	ic := res.init
	if ic == nil {
		return nil
	}
	cur, exists := mine[ic.Name]
	current := exists && cur.Labels[LabelRevision] == res.revision
	switch {
	case current && cur.State == runtime.StateExited && cur.ExitCode == 0 && !cur.ExitUnrecorded():
		return nil // done (an unrecorded exit is a reboot's: it never completed)
	case current && cur.State == runtime.StateRunning:
		r.log().InfoContext(ctx, "init container still running; waiting for it", "deployment", e.Namespace+"/"+e.Name, "container", ic.Name)
		return r.waitInit(ctx, e, cur, cur.StartedAt)
	case current && cur.State == runtime.StateCreated:
		if err := r.rt().Start(ctx, cur.ID); err != nil {
			return fmt.Errorf("start init container %s: %w", ic.Name, err)
		}
		return r.waitInit(ctx, e, cur, time.Now())
	}
	if exists {
		if err := r.stopRemove(ctx, cur); err != nil {
			return err
		}
		delete(mine, ic.Name)
	}
	spec := containerSpec(*ic, r.labels(e, res.revision, "init"))
	spec.RestartPolicy = runtime.RestartNo // always, whatever the score says
	spec.Ports = nil
	id, err := r.rt().Create(ctx, spec)
	if err != nil {
		return fmt.Errorf("create init container %s: %w", ic.Name, err)
	}
	c := runtime.Container{ID: id, Name: ic.Name, State: runtime.StateCreated}
	if err := r.rt().Start(ctx, id); err != nil {
		return fmt.Errorf("start init container %s: %w", ic.Name, err)
	}
	return r.waitInit(ctx, e, c, time.Now())
}

// waitInit waits for the running init container c, started at started
// (now when zero), until the init timeout since then: an *InitFailedError
// when it exits non-zero; an *InitTimeoutError, after stopping and
// removing it, when the bound passes first. When ctx ends first the
// container is left running for the next pass.
func (r *Reconciler) waitInit(ctx context.Context, e events.IntentEntry, c runtime.Container, started time.Time) error {
	bound := r.initTimeout()
	if started.IsZero() {
		started = time.Now()
	}
	wctx, cancel := context.WithDeadline(ctx, started.Add(bound))
	defer cancel()
	code, err := r.rt().Wait(wctx, c.ID)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return fmt.Errorf("wait for init container %s: %w", c.Name, ctx.Err())
	case wctx.Err() != nil:
		r.log().WarnContext(ctx, "init container outlived the init timeout; stopping it", "deployment", e.Namespace+"/"+e.Name,
			"container", c.Name, "timeout", bound)
		c.State = runtime.StateRunning
		// Not cut short by a cancelled pass: stopped but not removed, an
		// init container that exits 0 on SIGTERM would pass for completed.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.stopTimeout()+time.Minute)
		defer cancel()
		if err := r.stopRemove(rctx, c); err != nil {
			return fmt.Errorf("init container %s outlived the init timeout of %s: %w", c.Name, bound, err)
		}
		return &InitTimeoutError{Name: c.Name, Timeout: bound}
	default:
		return fmt.Errorf("wait for init container %s: %w", c.Name, err)
	}
	if code != 0 {
		return &InitFailedError{Name: c.Name, ExitCode: code}
	}
	r.log().InfoContext(ctx, "init container completed", "deployment", e.Namespace+"/"+e.Name, "container", c.Name)
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
// (starting it if it was created but never started, or exited and its
// restart policy restarts it: after a reboot or a crash), and replaces one
// of another revision or creates a missing one. Before the new container
// starts, the containers of the Deployment that hold its name or one of
// its host ports are stopped and removed — its own old container, a
// renamed or dropped service, another service the port moves from — and
// nothing else.
func (r *Reconciler) applyService(ctx context.Context, e events.IntentEntry, revision string, svc resolvedService, mine map[string]runtime.Container) error {
	cur, exists := mine[svc.Name]
	if exists && cur.Labels[LabelRevision] == revision {
		return r.keepService(ctx, e, svc, cur)
	}
	for _, c := range holders(svc, revision, mine) {
		if c.Name != svc.Name {
			r.log().InfoContext(ctx, "stopping a container that holds a host port of a new service", "deployment", e.Namespace+"/"+e.Name,
				"container", c.Name, "service", svc.Name)
		}
		if err := r.stopRemove(ctx, c); err != nil {
			return err
		}
		delete(mine, c.Name)
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

// holders are the containers of the Deployment (mine) that must go before
// svc's new container starts: the one with its name, and those of another
// revision, not exited, that publish one of its host ports (containers of
// this revision never do: preflight refuses a host port published twice).
// Sorted by name.
func holders(svc resolvedService, revision string, mine map[string]runtime.Container) []runtime.Container {
	want := map[string]bool{}
	ports, _ := portBindings(svc.Ports) // checked in preflight
	for _, p := range ports {
		want[portKey(p)] = true
	}
	var out []runtime.Container
	for _, c := range mine {
		if c.Name == svc.Name {
			out = append(out, c)
			continue
		}
		if c.State == runtime.StateExited || c.Labels[LabelRevision] == revision {
			continue
		}
		if slices.ContainsFunc(c.Ports, func(p runtime.PortBinding) bool { return want[portKey(p)] }) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b runtime.Container) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// portKey is "proto/port" of a host port ("tcp" when unset).
func portKey(p runtime.PortBinding) string {
	proto := p.Protocol
	if proto == "" {
		proto = "tcp"
	}
	return proto + "/" + strconv.Itoa(int(p.HostPort))
}

// keepService starts a service container of the current revision that is
// not running when it should: created but never started (a crash between
// create and start), or exited and restarted by its restart policy
// (restarts). Running or kept down by its policy, it is left alone
// (checkServicesUp reports the latter).
func (r *Reconciler) keepService(ctx context.Context, e events.IntentEntry, svc resolvedService, cur runtime.Container) error {
	switch {
	case cur.State == runtime.StateCreated:
	case cur.State == runtime.StateExited && restarts(restartPolicy(svc), failed(cur)):
		r.log().InfoContext(ctx, "restarting an exited service", "deployment", e.Namespace+"/"+e.Name, "container", svc.Name,
			"exit_code", cur.ExitCode, "restart_policy", restartPolicy(svc))
	default:
		return nil
	}
	if err := r.rt().Start(ctx, cur.ID); err != nil {
		return fmt.Errorf("start service %s: %w", svc.Name, err)
	}
	return nil
}

// restartPolicy is the policy svc's container was created with.
func restartPolicy(svc resolvedService) string {
	if svc.RestartPolicy == "" {
		return runtime.RestartUnlessStopped
	}
	return string(svc.RestartPolicy)
}

// restarts reports whether policy restarts an exited container that
// failed or not: always and unless-stopped do, on-failure when it failed,
// no never.
func restarts(policy string, failed bool) bool {
	switch policy {
	case runtime.RestartAlways, runtime.RestartUnlessStopped:
		return true
	case runtime.RestartOnFailure:
		return failed
	default:
		return false
	}
}

// failed reports whether the exited container c failed: a non-zero exit
// code, or an exit the engine never saw (the host went down while it ran;
// the exit code Podman shows then is stale).
func failed(c runtime.Container) bool {
	return c.ExitCode != 0 || c.ExitUnrecorded()
}

// checkServicesUp returns a *ServiceDownError (several joined) for each
// service of the current revision that is exited after the pass and whose
// restart policy keeps it down. Exit code 0 is no exception: a service is
// long-running, and after a reboot Podman shows a container that was
// running as exited with its last exit code, usually 0.
func (r *Reconciler) checkServicesUp(ctx context.Context, e events.IntentEntry, res resolved) error {
	_, mine, err := r.containers(ctx, e.Namespace, e.Name)
	if err != nil {
		return err
	}
	var errs []error
	for _, svc := range res.services {
		c, ok := mine[svc.Name]
		if !ok || c.Labels[LabelRevision] != res.revision || c.State != runtime.StateExited || restarts(restartPolicy(svc), failed(c)) {
			continue
		}
		errs = append(errs, &ServiceDownError{Name: svc.Name, ExitCode: c.ExitCode, RestartPolicy: restartPolicy(svc)})
	}
	return errors.Join(errs...)
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

// preflight checks names, ports, ownership and images before any change;
// with a signature policy, the images' signatures too (verifyImages, which
// pins each container of res to the digest it verified).
func (r *Reconciler) preflight(ctx context.Context, e events.IntentEntry, res *resolved, all []runtime.Container, mine map[string]runtime.Container) error {
	var svcs []resolvedService
	if res.init != nil {
		svcs = append(svcs, *res.init)
	}
	svcs = append(svcs, res.services...)
	problems := conflicts(svcs, all, mine)
	problems = append(problems, r.hostListeners(ctx, svcs, all)...)
	if len(problems) > 0 {
		return &PreflightError{Reason: strings.Join(problems, "; ")}
	}
	if err := r.ensureHostPaths(svcs); err != nil {
		return err
	}
	if err := r.checkImageStore(ctx, svcs); err != nil {
		return err
	}
	if err := r.ensureImages(ctx, svcs); err != nil {
		return err
	}
	return r.verifyImages(ctx, e, res)
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

// hostListeners asks PortInUse, when set, about every wanted host port no
// running container publishes (rootless Podman's port forwarder listens for
// those; a foreign holder is reported by conflicts) and lists those a
// process that is not a container listens on. A port that cannot be checked
// is logged and let through: the service's start then says why.
func (r *Reconciler) hostListeners(ctx context.Context, svcs []resolvedService, all []runtime.Container) []string {
	if r.PortInUse == nil {
		return nil
	}
	published := map[string]bool{}
	for _, c := range all {
		if c.State == runtime.StateExited || c.State == runtime.StateCreated {
			continue
		}
		for _, p := range c.Ports {
			published[portKey(p)] = true
		}
	}
	var problems []string
	for _, s := range svcs {
		ports, _ := portBindings(s.Ports) // a bad one is reported by conflicts
		for _, p := range ports {
			k := portKey(p)
			if published[k] {
				continue
			}
			proto, _, _ := strings.Cut(k, "/")
			inUse, err := r.PortInUse(proto, p.HostPort)
			if err != nil {
				r.log().WarnContext(ctx, "cannot check whether a host port is free", "port", k, "service", s.Name, "error", err)
				continue
			}
			if inUse {
				problems = append(problems, fmt.Sprintf("host port %s wanted by %s is in use by a process that is not a container: "+
					"stop that process or publish %s on another host port", k, s.Name, s.Name))
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
		r.PullBackoff.present(s.Image)
		return nil
	}
	key := pullKey{image: s.Image, secret: s.ImagePullSecret}
	if pe, held := r.PullBackoff.held(key); held {
		return pullErr(s.Image, pe) // the same error, the same report: nothing new to say
	}
	auth, err := r.pullAuth(ctx, s)
	if err != nil {
		return err
	}
	err = r.rt().Pull(ctx, s.Image, auth)
	r.PullBackoff.pulled(key, err)
	if err != nil {
		return pullErr(s.Image, err)
	}
	return nil
}

// pullAuth reads s's pull credential: nil when it names none; an error
// when it cannot be read or is for another registry than s.Image's (the
// credential is never sent elsewhere).
func (r *Reconciler) pullAuth(ctx context.Context, s score.Service) (*runtime.RegistryAuth, error) {
	if s.ImagePullSecret == "" {
		return nil, nil
	}
	if r.Credentials == nil {
		return nil, fmt.Errorf("image %s needs pull secret %s but no secret source is configured", s.Image, s.ImagePullSecret)
	}
	raw, err := r.Credentials.PullCredential(ctx, s.ImagePullSecret)
	if err != nil {
		r.Metrics.secretFailed(ctx)
		return nil, fmt.Errorf("pull secret %s: %w", s.ImagePullSecret, secretSourceErr(err))
	}
	cred, err := ParsePullCredential(raw)
	if err != nil {
		return nil, fmt.Errorf("pull secret %s: %w", s.ImagePullSecret, err)
	}
	if got, want := ImageAuthority(s.Image), NormaliseAuthority(cred.Registry); got != want {
		return nil, fmt.Errorf("pull secret %s is for registry %s, but image %s is on %s: refusing to send the credential", s.ImagePullSecret, want, s.Image, got)
	}
	return &runtime.RegistryAuth{Username: cred.Username, Password: cred.Password}, nil
}

// pullErr is the error of a failed pull of image: a *runtime.PullError as
// it is (it names the image itself), inside an *UnavailableError when the
// registry was unavailable; anything else (a cancelled pull, an engine
// that cannot be reached) wrapped with the image.
func pullErr(image string, err error) error {
	var pe *runtime.PullError
	if !errors.As(err, &pe) {
		err = fmt.Errorf("pull %s: %w", image, err)
	}
	if errors.Is(err, runtime.ErrRegistryUnavailable) {
		return &UnavailableError{Component: ComponentRegistry, Err: err}
	}
	return err
}

// stopRemove stops a container with the stop timeout, then force-removes
// it. Its stop is expected (expectStop): the monitor ignores its death.
func (r *Reconciler) stopRemove(ctx context.Context, c runtime.Container) error {
	r.expectStop.add(c.ID) // its death, and a restart by its policy meanwhile, are not the workload's
	if c.State == runtime.StateRunning {
		if err := r.rt().Stop(ctx, c.ID, r.stopTimeout()); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			r.log().WarnContext(ctx, "stop failed, removing by force", "container", c.Name, "error", err)
		}
	}
	for attempt := 1; ; attempt++ {
		err := r.rt().Remove(ctx, c.ID, true)
		if err == nil || errors.Is(err, runtime.ErrNotFound) {
			return nil
		}
		if attempt == removeAttempts || runtime.IsUnavailable(err) || ctx.Err() != nil {
			return fmt.Errorf("remove %s: %w", c.Name, err)
		}
		// A container that dies or is restarted by its policy while the
		// engine kills it (a crash loop) fails the removal ("could not be
		// stopped … container state improper"): it is in another state
		// now, and a removal a moment later succeeds.
		r.log().DebugContext(ctx, "remove failed, trying again", "container", c.Name, "attempt", attempt, "error", err)
		t := time.NewTimer(time.Duration(attempt) * removeRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("remove %s: %w", c.Name, err)
		case <-t.C:
		}
	}
}

// removeAttempts is how many times stopRemove tries a force-remove,
// removeRetry the wait before the second try (twice it before the
// third): a removal that raced the container's own death succeeds on the
// next try; one that fails for good costs well under a second more.
const (
	removeAttempts = 3
	removeRetry    = 100 * time.Millisecond
)

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
	spec := runtime.ContainerSpec{Name: s.Name, Image: cmp.Or(s.verified, s.Image), Env: env, Ports: ports, Labels: labels,
		RestartPolicy: string(s.RestartPolicy)}
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = runtime.RestartUnlessStopped
	}
	if labels[LabelRole] == "service" {
		labels[LabelRestartPolicy] = spec.RestartPolicy
		if hc := s.Healthcheck; hc != nil {
			set := hc.Settings()
			spec.HealthCheck = &runtime.HealthCheck{Command: set.Command, Interval: set.Interval, Timeout: set.Timeout,
				StartPeriod: set.StartPeriod, Retries: set.Retries}
		}
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
