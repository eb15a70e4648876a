// Package sim owns an in-memory runtime.Runtime: containers with states and
// exit codes, a local image store, and a registry map whose images may
// require a pull credential. It stands in for Podman in scale tests (one
// Runtime per simulated device, thousands per process) and in `fleet dev`.
//
// Invariants: it is deterministic (IDs count up per Runtime, no clocks
// unless Options.Now is set, no randomness, no goroutines of its own,
// health checks only when RunHealthCheck is called), safe for
// concurrent use, and it behaves like Podman wherever the
// runtime/runtimetest conformance suite says how Podman behaves; it never
// puts a password or an environment value into an error. Reboot puts its
// containers in the states Podman leaves after a host restart.
//
// Restart policies are acted on synchronously: when Exit or Crash ends a
// running container, the container dies (an EventDied) and, when its
// policy restarts it, starts again before the call returns (RestartCount
// grows by one, an EventStart follows), as Podman does at once and without
// backoff. Stop and Remove are the user's doing and restart nothing. Watch
// delivers the events of every call as it happens (a watch ends when its
// context does: context.AfterFunc closes the channel). Behaviour.Output and
// Print script what Logs returns.
//
// What it does not simulate: a restart of a container that exits right at
// its start (Behaviour.Exits): Podman restarts such a container in a loop,
// the simulated runtime leaves it exited (script a crash loop with Crash);
// the delay between a death and its restart; on-failure's retry limit;
// mount contents (a mount's host path is checked only when
// Options.HostPathExists is set); host ports held by non-container
// processes; and the time a stop takes.
//
// It may be imported by agent packages and their tests, cmd/fleet-agent
// (--runtime sim), package dev (the simulated devices of `fleet dev`)
// and the scale benchmark (package bench); it links no Kubernetes
// code.
package sim

import (
	"context"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// Exit codes a stopped container reports, as Podman does: 128 + the signal.
const (
	ExitCodeSIGTERM = 143
	ExitCodeSIGKILL = 137
)

// Behaviour is what a container's process does once started.
type Behaviour struct {
	// Exits makes the container exit right after it starts, with ExitCode.
	// Otherwise it runs until stopped, killed or Exit is called.
	Exits    bool
	ExitCode int
	// IgnoresTerm makes Stop end the container by SIGKILL (exit code 137)
	// instead of SIGTERM (143).
	IgnoresTerm bool
	// HealthCheckFails makes every run of the container's health check
	// fail (exit code 1, output HealthCheckFailedOutput); otherwise every
	// run passes.
	HealthCheckFails bool
	// Output is what the container prints each time it starts, one line
	// each (Logs returns it).
	Output []string
}

// HealthCheckFailedOutput is what a failing simulated health check prints.
const HealthCheckFailedOutput = "sim: health check failed"

// RegistryImage is an image the simulated registry serves.
type RegistryImage struct {
	// Auth, when set, is the only credential the registry accepts for the
	// image; a pull without it, or with another, is runtime.ErrAuth.
	Auth *runtime.RegistryAuth
	// Layers are the layers its manifest lists, with the sizes it claims
	// (MissingLayers returns them; a Pull stores them, each once, in the
	// image store). None: an image of no size.
	Layers []runtime.Layer
}

// DefaultStoreSize is the size of the simulated image store when
// Options.StoreSize is 0.
const DefaultStoreSize int64 = 1 << 40

// Options configures a Runtime. The zero value is an engine with no images.
type Options struct {
	// LocalImages are present locally from the start.
	LocalImages []string
	// Registry maps image references to the images a Pull can fetch. A
	// reference absent from it is runtime.ErrImageNotFound.
	Registry map[string]RegistryImage
	// Unreachable are registry authorities (host:port) that refuse
	// connections: a Pull of an image on one is a *runtime.PullError with
	// runtime.ErrRegistryUnavailable, as Podman's is.
	Unreachable []string
	// HostPathExists reports whether a mount's host path exists; Create
	// fails for a missing one, as Podman's does. Nil means every path
	// exists (the file system is never touched).
	HostPathExists func(path string) bool
	// Behave decides what a container does when started; nil means
	// DefaultBehaviour. It must be deterministic and safe for concurrent use.
	Behave func(spec runtime.ContainerSpec) Behaviour
	// StoreSize is the size in bytes of the file system of the image
	// store (ImageStoreSpace); 0 means DefaultStoreSize. What the pulled
	// layers take (their manifest sizes) is not free; StoreUsed more is
	// taken by files that are not the engine's.
	StoreSize int64
	StoreUsed int64
	// Now, when set, is the clock read to report a container's StartedAt
	// and FinishedAt; nil leaves them zero (the runtime reads no clock).
	Now func() time.Time
}

var exitPattern = regexp.MustCompile(`exit-(\d+)`)

// DefaultBehaviour scripts containers by image name: a name containing
// "exit-<n>" exits with n right after it starts; one containing
// "ignore-term" runs until killed and ignores SIGTERM; any other runs until
// stopped. A health check whose program is false (or a path ending in
// /false) fails, as the real program does; any other passes.
func DefaultBehaviour(spec runtime.ContainerSpec) Behaviour {
	if m := exitPattern.FindStringSubmatch(spec.Image); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return Behaviour{Exits: true, ExitCode: n}
		}
	}
	b := Behaviour{IgnoresTerm: strings.Contains(spec.Image, "ignore-term")}
	if hc := spec.HealthCheck; hc != nil && len(hc.Command) > 0 {
		b.HealthCheckFails = hc.Command[0] == "false" || strings.HasSuffix(hc.Command[0], "/false")
	}
	return b
}

// Runtime is an in-memory container engine. Create it with New.
type Runtime struct {
	// unavailable makes every engine call fail with runtime.ErrUnavailable.
	unavailable atomic.Bool
	// registryDown makes every Pull fail with runtime.ErrRegistryUnavailable.
	registryDown atomic.Bool
	now          func() time.Time

	behave   func(spec runtime.ContainerSpec) Behaviour
	hostPath func(path string) bool

	mu       sync.Mutex // guards the fields below
	nextID   uint64
	images   map[string]bool
	registry map[string]RegistryImage
	// layers are the layers in the image store (digest → size).
	layers    map[string]int64
	storeSize int64
	storeUsed int64
	// unreachable holds Options.Unreachable, normalised; read-only.
	unreachable map[string]bool
	byID        map[string]*container
	byName      map[string]*container
	// watches are the open Watch calls.
	watches map[*watch]bool
}

// container is one simulated container; its fields are guarded by
// Runtime.mu.
type container struct {
	id         string
	spec       runtime.ContainerSpec
	behaviour  Behaviour
	state      runtime.State
	exitCode   int
	startedAt  time.Time
	finishedAt time.Time
	// now is the runtime's clock (nil: none).
	now func() time.Time
	// exited is closed when the container exits or is removed; a start
	// after an exit makes a new one.
	exited  chan struct{}
	removed bool
	// health is the container's health when its spec has a check.
	health *runtime.Health
	// restartCount counts policy restarts since the last Start call.
	restartCount int
	// oomKilled is set by a Crash with oom and never cleared, as Podman's.
	oomKilled bool
	// logs is what the container printed, oldest first, at most
	// MaxLogLines; logAt when each was printed (Options.Now, zero
	// without it); printed counts every line ever printed (StreamLogs
	// follows it).
	logs    []string
	logAt   []time.Time
	printed int
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a Runtime configured by opts. It copies what it keeps.
func New(opts Options) *Runtime {
	r := &Runtime{
		behave:    opts.Behave,
		hostPath:  opts.HostPathExists,
		now:       opts.Now,
		images:    make(map[string]bool, len(opts.LocalImages)),
		registry:  maps.Clone(opts.Registry),
		layers:    make(map[string]int64),
		storeSize: opts.StoreSize,
		storeUsed: opts.StoreUsed,
		byID:      make(map[string]*container),
		byName:    make(map[string]*container),
		watches:   make(map[*watch]bool),
	}
	if r.behave == nil {
		r.behave = DefaultBehaviour
	}
	if r.registry == nil {
		r.registry = make(map[string]RegistryImage)
	}
	for _, ref := range opts.LocalImages {
		r.images[ref] = true
	}
	r.unreachable = make(map[string]bool, len(opts.Unreachable))
	for _, a := range opts.Unreachable {
		r.unreachable[runtime.NormaliseAuthority(a)] = true
	}
	return r
}

// SetUnavailable makes every engine call (List … Remove, Watch, Logs) fail
// with runtime.ErrUnavailable while down is true, as an engine whose socket
// is gone does; going down also ends every open watch (an EventLost, then
// the channel is closed), as the engine's event stream breaks.
func (r *Runtime) SetUnavailable(down bool) {
	r.unavailable.Store(down)
	if down {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.endWatches()
	}
}

// down is the error of a call while the engine is unavailable.
func (r *Runtime) down(op string) error {
	if r.unavailable.Load() {
		return fmt.Errorf("sim: %s: %w", op, runtime.ErrUnavailable)
	}
	return nil
}

// SetRegistryUnavailable makes every Pull fail with
// runtime.ErrRegistryUnavailable while down is true, as a pull from a
// registry that refuses connections, does not resolve or answers 503 does;
// the engine itself keeps answering.
func (r *Runtime) SetRegistryUnavailable(down bool) { r.registryDown.Store(down) }

// AddImage makes ref present locally, as if it had been built or pulled.
func (r *Runtime) AddImage(ref string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.images[ref] = true
}

// RemoveImage makes ref absent locally.
func (r *Runtime) RemoveImage(ref string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.images, ref)
}

// Publish makes the registry serve ref, with auth required when not nil.
func (r *Runtime) Publish(ref string, auth *runtime.RegistryAuth) {
	r.mu.Lock()
	defer r.mu.Unlock()
	img := RegistryImage{}
	if auth != nil {
		a := *auth
		img.Auth = &a
	}
	r.registry[ref] = img
}

// RestartPolicy returns the restart policy stored for a container ("no" when
// the spec left it empty); runtime.ErrNotFound when it does not exist.
func (r *Runtime) RestartPolicy(idOrName string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(idOrName)
	if err != nil {
		return "", err
	}
	return c.spec.RestartPolicy, nil
}

// Exit makes a running container exit with code, as if its process ended
// by itself; it is Crash without an OOM kill: the container's restart
// policy is acted on.
func (r *Runtime) Exit(idOrName string, code int) error {
	return r.Crash(idOrName, code, false)
}

// Reboot puts the containers in the state Podman leaves them in after the
// host restarts (libpod's refresh, resetContainerState): every container
// that was running (or in another started state) is exited with its last
// exit code kept — 0 when it never exited before — and no new finish time,
// so its FinishedAt stays before its StartedAt; a created one stays
// created. Nothing is started again. Waiters of the running containers
// return, as their processes end with the host.
func (r *Runtime) Reboot() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.byID {
		if c.state == runtime.StateCreated || c.state == runtime.StateExited {
			continue
		}
		c.state = runtime.StateExited
		close(c.exited)
	}
	for _, c := range r.byID {
		c.restartCount = 0 // Podman's refresh resets it
	}
	r.endWatches() // the engine's event stream ends with the host
}

// lookup finds a container by name, full ID or unique ID prefix, as Podman
// does. The caller holds r.mu.
func (r *Runtime) lookup(idOrName string) (*container, error) {
	if c, ok := r.byName[idOrName]; ok {
		return c, nil
	}
	if c, ok := r.byID[idOrName]; ok {
		return c, nil
	}
	var found *container
	if idOrName != "" {
		for id, c := range r.byID {
			if strings.HasPrefix(id, idOrName) {
				if found != nil {
					return nil, fmt.Errorf("sim: %q names more than one container", idOrName)
				}
				found = c
			}
		}
	}
	if found == nil {
		return nil, fmt.Errorf("sim: container %q: %w", idOrName, runtime.ErrNotFound)
	}
	return found, nil
}

func (c *container) exit(code int) {
	c.state = runtime.StateExited
	c.exitCode = code
	if c.now != nil {
		c.finishedAt = c.now()
	}
	close(c.exited)
}

func (c *container) view() runtime.Container {
	return runtime.Container{
		ID:         c.id,
		Name:       c.spec.Name,
		Image:      c.spec.Image,
		Labels:     maps.Clone(c.spec.Labels),
		State:      c.state,
		ExitCode:   c.exitCode,
		Ports:      slices.Clone(c.spec.Ports),
		StartedAt:  c.startedAt,
		FinishedAt: c.finishedAt,
	}
}

// inspectView is view with what only Inspect reports: the container's
// health, restart count, OOM flag and image digest.
func (c *container) inspectView() runtime.Container {
	v := c.view()
	if c.health != nil {
		h := *c.health
		v.Health = &h
	}
	v.RestartCount, v.OOMKilled, v.ImageDigest = c.restartCount, c.oomKilled, ImageDigest(c.spec.Image)
	return v
}

// List returns every container, sorted by ID (creation order).
func (r *Runtime) List(ctx context.Context) ([]runtime.Container, error) {
	if err := r.down("list"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: list: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]runtime.Container, 0, len(r.byID))
	for _, c := range r.byID {
		out = append(out, c.view())
	}
	slices.SortFunc(out, func(a, b runtime.Container) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Inspect returns one container; runtime.ErrNotFound when it does not exist.
func (r *Runtime) Inspect(ctx context.Context, idOrName string) (runtime.Container, error) {
	if err := r.down("inspect"); err != nil {
		return runtime.Container{}, err
	}
	if err := ctx.Err(); err != nil {
		return runtime.Container{}, fmt.Errorf("sim: inspect %s: %w", idOrName, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(idOrName)
	if err != nil {
		return runtime.Container{}, err
	}
	return c.inspectView(), nil
}

// ImageExists reports whether ref is present locally.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	if err := r.down("imageexists"); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("sim: image exists %s: %w", ref, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.images[ref], nil
}

// ImageDigest is the digest a local image was pulled with: ImageDigest(ref)
// for an image the simulated registry served or a reference by digest;
// "" for one only added locally (AddImage, Options.LocalImages) by tag;
// runtime.ErrImageNotFound when ref is not present.
func (r *Runtime) ImageDigest(ctx context.Context, ref string) (string, error) {
	if err := r.down("imagedigest"); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("sim: image digest %s: %w", ref, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.images[ref] {
		return "", fmt.Errorf("sim: image digest %s: %w", ref, runtime.ErrImageNotFound)
	}
	if _, pulled := r.registry[ref]; pulled || strings.Contains(ref, "@") {
		return ImageDigest(ref), nil
	}
	return "", nil
}

// Pull makes ref present locally when the registry serves it and accepts
// auth: runtime.ErrImageNotFound when it does not serve it, runtime.ErrAuth
// when the image requires a credential other than auth. Like a registry, it
// checks the image before the credential only when the credential is right
// or not required. While SetRegistryUnavailable(true) every pull, and
// always a pull from an Options.Unreachable registry, is
// runtime.ErrRegistryUnavailable. Each of these failures is a
// *runtime.PullError worded as runtime/podman words it.
func (r *Runtime) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	if err := r.down("pull"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: pull %s: %w", ref, err)
	}
	if r.registryDown.Load() || r.unreachable[runtime.ImageAuthority(ref)] {
		return runtime.NewPullError(ref, auth, runtime.ErrRegistryUnavailable, runtime.PullCauseRefused, "connection refused")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	img, ok := r.registry[ref]
	if !ok {
		return runtime.NewPullError(ref, auth, runtime.ErrImageNotFound, runtime.PullCauseNotFound, "manifest unknown")
	}
	if img.Auth != nil && (auth == nil || *auth != *img.Auth) {
		return runtime.NewPullError(ref, auth, runtime.ErrAuth, runtime.PullCauseAuth, "unauthorized: authentication required")
	}
	r.images[ref] = true
	// As in Podman's store, an image pulled by tag also answers to its
	// repository at its digest (what a signature check pins it to).
	if !strings.Contains(ref, "@") {
		name := ref
		if slash := strings.LastIndex(ref, "/"); strings.LastIndex(ref, ":") > slash {
			name = ref[:strings.LastIndex(ref, ":")]
		}
		r.images[name+"@"+ImageDigest(ref)] = true
	}
	for _, l := range img.Layers {
		r.layers[l.Digest] = l.Size
	}
	return nil
}

// Create creates a container in the created state: runtime.ErrNameInUse when
// the name is taken, runtime.ErrImageNotFound when the image is not present
// locally. An empty name gets a generated one.
func (r *Runtime) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	if err := r.down("create"); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("sim: create %s: %w", spec.Name, err)
	}
	behaviour := r.behave(spec)
	if r.hostPath != nil {
		for _, m := range spec.Mounts {
			if !r.hostPath(m.HostPath) {
				return "", fmt.Errorf("sim: create %s: mount %s: host path %s does not exist", spec.Name, m.ContainerPath, m.HostPath)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if spec.Image == "" {
		return "", fmt.Errorf("sim: create %s: no image", spec.Name)
	}
	if !r.images[spec.Image] {
		return "", fmt.Errorf("sim: create %s: image %s is not present locally: %w", spec.Name, spec.Image, runtime.ErrImageNotFound)
	}
	switch spec.RestartPolicy {
	case "":
		spec.RestartPolicy = runtime.RestartNo
	case runtime.RestartNo, runtime.RestartAlways, runtime.RestartOnFailure, runtime.RestartUnlessStopped:
	default:
		return "", fmt.Errorf("sim: create %s: unknown restart policy %q (want no, always, on-failure or unless-stopped)", spec.Name, spec.RestartPolicy)
	}
	r.nextID++
	id := fmt.Sprintf("%064x", r.nextID)
	if spec.Name == "" {
		spec.Name = "sim-" + id[len(id)-12:]
	}
	if _, taken := r.byName[spec.Name]; taken {
		r.nextID--
		return "", fmt.Errorf("sim: create %s: %w", spec.Name, runtime.ErrNameInUse)
	}
	spec.Env = maps.Clone(spec.Env)
	spec.Labels = maps.Clone(spec.Labels)
	spec.Ports = slices.Clone(spec.Ports)
	for i := range spec.Ports {
		if spec.Ports[i].Protocol == "" {
			spec.Ports[i].Protocol = "tcp"
		}
	}
	spec.Mounts = slices.Clone(spec.Mounts)
	c := &container{id: id, spec: spec, behaviour: behaviour, state: runtime.StateCreated, exited: make(chan struct{}), now: r.now}
	if spec.HealthCheck != nil {
		hc := *spec.HealthCheck
		hc.Command = slices.Clone(hc.Command)
		c.spec.HealthCheck = &hc
		c.health = &runtime.Health{Status: runtime.HealthStarting}
	}
	r.byID[id] = c
	r.byName[spec.Name] = c
	return id, nil
}

// Start starts a created or exited container; starting a running one does
// nothing. Like Podman, it fails when another running container holds one
// of its host ports, and the container stays as it was.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := r.down("start"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: start %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	if c.state == runtime.StateRunning {
		return nil
	}
	for _, p := range c.spec.Ports {
		if holder := r.portHolder(p, c); holder != nil {
			return fmt.Errorf("sim: start %s: cannot listen on the %s port %d: held by container %s: address already in use",
				c.spec.Name, strings.ToUpper(p.Protocol), p.HostPort, holder.spec.Name)
		}
	}
	c.restartCount = 0 // a user's start resets it, as Podman's does
	r.run(c)
	if c.behaviour.Exits {
		r.die(c, c.behaviour.ExitCode)
	}
	return nil
}

// run makes c running (a Start or a policy restart): it prints its
// Behaviour.Output and an EventStart is delivered. The caller holds r.mu.
func (r *Runtime) run(c *container) {
	if c.state == runtime.StateExited {
		c.exited = make(chan struct{})
	}
	c.state = runtime.StateRunning
	c.exitCode = 0
	if r.now != nil {
		c.startedAt = r.now()
	}
	if c.health != nil { // Podman starts every run of the container over as starting
		c.health.Status, c.health.FailingStreak = runtime.HealthStarting, 0
	}
	c.print(c.behaviour.Output...)
	r.emit(c, runtime.ContainerEvent{Kind: runtime.EventStart})
}

// die ends running c with code and delivers its EventDied. The caller holds
// r.mu.
func (r *Runtime) die(c *container, code int) {
	c.exit(code)
	r.emit(c, runtime.ContainerEvent{Kind: runtime.EventDied, ExitCode: code})
}

// portHolder returns the running container other than self publishing p's
// host port and protocol. The caller holds r.mu.
func (r *Runtime) portHolder(p runtime.PortBinding, self *container) *container {
	for _, c := range r.byID {
		if c == self || c.state != runtime.StateRunning {
			continue
		}
		for _, q := range c.spec.Ports {
			if q.HostPort == p.HostPort && q.Protocol == p.Protocol {
				return c
			}
		}
	}
	return nil
}

// Wait blocks until the container is exited and returns its exit code; at
// once when it already is. A created container is waited for like a running
// one.
func (r *Runtime) Wait(ctx context.Context, id string) (int, error) {
	if err := r.down("wait"); err != nil {
		return 0, err
	}
	r.mu.Lock()
	c, err := r.lookup(id)
	if err != nil {
		r.mu.Unlock()
		return -1, err
	}
	for c.state != runtime.StateExited {
		if c.removed {
			r.mu.Unlock()
			return -1, fmt.Errorf("sim: wait %s: removed: %w", id, runtime.ErrNotFound)
		}
		exited := c.exited
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("sim: wait %s: %w", id, ctx.Err())
		case <-exited:
		}
		r.mu.Lock()
	}
	code := c.exitCode
	r.mu.Unlock()
	return code, nil
}

// Stop ends a running container at once: with exit code 143 (SIGTERM), or
// 137 (SIGKILL after the timeout) when its behaviour ignores SIGTERM. The
// timeout is not waited for. Stopping a container that does not run does
// nothing.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	if err := r.down("stop"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: stop %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	if c.state != runtime.StateRunning {
		return nil
	}
	code := ExitCodeSIGTERM
	if c.behaviour.IgnoresTerm {
		code = ExitCodeSIGKILL
	}
	r.die(c, code)
	return nil
}

// Remove removes a container. A running one is refused unless force, which
// kills it first (exit code 137). Waiters of a removed container return.
func (r *Runtime) Remove(ctx context.Context, id string, force bool) error {
	if err := r.down("remove"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: remove %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	if c.state == runtime.StateRunning {
		if !force {
			return fmt.Errorf("sim: remove %s: the container is running: stop it first or force", c.spec.Name)
		}
		r.die(c, ExitCodeSIGKILL)
	}
	if c.state != runtime.StateExited {
		close(c.exited) // wakes waiters of a created container
	}
	c.removed = true
	delete(r.byID, c.id)
	delete(r.byName, c.spec.Name)
	r.emit(c, runtime.ContainerEvent{Kind: runtime.EventRemoved})
	return nil
}

// RunHealthCheck runs the container's simulated health check once: it
// passes or fails as the container's Behaviour says, and the container's
// health follows Podman's rules (a pass makes it healthy and resets the
// streak; a failure within StartPeriod of the start does not count, which
// needs Options.Now: without a clock every failure counts; Retries
// failures in a row make it unhealthy). runtime.ErrNotFound when the
// container does not exist; an error when it has no check or does not
// run.
func (r *Runtime) RunHealthCheck(ctx context.Context, id string) error {
	if err := r.down("healthcheck"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: health check %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(id)
	if err != nil {
		return err
	}
	if c.health == nil {
		return fmt.Errorf("sim: health check %s: the container has no health check", c.spec.Name)
	}
	if c.state != runtime.StateRunning {
		return fmt.Errorf("sim: health check %s: the container is not running", c.spec.Name)
	}
	h := c.health
	h.Checks = min(h.Checks+1, 5)
	if r.now != nil {
		h.LastStart = r.now()
		h.LastEnd = h.LastStart
	}
	defer func() { r.emit(c, runtime.ContainerEvent{Kind: runtime.EventHealth, Health: h.Status}) }()
	if !c.behaviour.HealthCheckFails {
		h.Status, h.FailingStreak, h.LastExitCode, h.LastOutput = runtime.HealthHealthy, 0, 0, ""
		return nil
	}
	h.LastExitCode, h.LastOutput = 1, HealthCheckFailedOutput
	if r.now != nil && r.now().Before(c.startedAt.Add(c.spec.HealthCheck.StartPeriod)) {
		return nil // within the start period: does not count
	}
	h.FailingStreak++
	if h.FailingStreak >= c.spec.HealthCheck.Retries {
		h.Status = runtime.HealthUnhealthy
	}
	return nil
}
