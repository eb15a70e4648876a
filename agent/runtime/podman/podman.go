package podman

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/specgen"
	spec "github.com/opencontainers/runtime-spec/specs-go"
	nettypes "go.podman.io/common/libnetwork/types"
	"go.podman.io/image/v5/manifest"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// Options configures a Runtime.
type Options struct {
	// URI of the Podman API service, a unix socket:
	// "unix:///run/podman/podman.sock" (rootful) or
	// "unix:///run/user/<uid>/podman/podman.sock" (rootless). Required.
	URI string
}

// Validate reports an unusable URI.
func (o Options) Validate() error {
	if o.URI == "" {
		return fmt.Errorf("%w: URI is empty: set it to the Podman socket, e.g. unix:///run/podman/podman.sock", ErrOptions)
	}
	u, err := url.Parse(o.URI)
	if err != nil {
		return fmt.Errorf("%w: URI %q: %w", ErrOptions, o.URI, err)
	}
	if u.Scheme != "unix" || u.Path == "" {
		return fmt.Errorf("%w: URI %q is not a unix socket: use unix:///path/to/podman.sock", ErrOptions, o.URI)
	}
	return nil
}

// Runtime is the runtime.Runtime on a Podman API service. Create it with
// New; it is safe for concurrent use.
type Runtime struct {
	// conn carries the bindings' connection as context values; it is never
	// used for cancellation or deadlines (it is detached with
	// context.WithoutCancel). The bindings find their connection only in a
	// context, so each call merges it into the caller's context (see call).
	conn context.Context
}

var _ runtime.Runtime = (*Runtime)(nil)

// New connects to the Podman service named by opts and checks that it
// answers (the bindings ping it and read its version). ctx bounds the
// connection attempt only.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	conn, err := bindings.NewConnection(ctx, opts.URI)
	if err != nil {
		return nil, fmt.Errorf("podman: connect to %s: %w", opts.URI, err)
	}
	return &Runtime{conn: context.WithoutCancel(conn)}, nil
}

// Close releases idle connections to the service. The Runtime stays usable;
// Close may be called any number of times.
func (r *Runtime) Close() error {
	if c, err := bindings.GetClient(r.conn); err == nil && c.Client != nil {
		c.Client.CloseIdleConnections()
	}
	return nil
}

// callCtx is the caller's context (cancellation, deadline, values) that
// also answers the bindings' connection keys from the runtime's connection.
type callCtx struct {
	context.Context
	conn context.Context
}

func (c callCtx) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.conn.Value(key)
}

// call returns the context for one bindings call.
func (r *Runtime) call(ctx context.Context) context.Context {
	return callCtx{Context: ctx, conn: r.conn}
}

// List returns every container of the engine, running or not, the agent's
// and foreign ones.
func (r *Runtime) List(ctx context.Context) ([]runtime.Container, error) {
	list, err := containers.List(r.call(ctx), new(containers.ListOptions).WithAll(true))
	if err != nil {
		return nil, redact(fmt.Errorf("podman: list containers: %w", err), nil)
	}
	out := make([]runtime.Container, 0, len(list))
	for _, c := range list {
		var name string
		if len(c.Names) > 0 {
			name = c.Names[0]
		}
		var ports []runtime.PortBinding
		for _, p := range c.Ports {
			for i := range max(p.Range, 1) {
				ports = append(ports, runtime.PortBinding{
					HostPort: p.HostPort + i, ContainerPort: p.ContainerPort + i, Protocol: protocol(p.Protocol),
				})
			}
		}
		var started, finished time.Time
		if c.StartedAt > 0 {
			started = time.Unix(c.StartedAt, 0)
		}
		if c.ExitedAt > 0 {
			finished = time.Unix(c.ExitedAt, 0)
		}
		out = append(out, runtime.Container{
			ID:         c.ID,
			Name:       name,
			Image:      c.Image,
			Labels:     c.Labels,
			State:      state(c.State),
			ExitCode:   int(c.ExitCode),
			Ports:      ports,
			StartedAt:  started,
			FinishedAt: finished,
		})
	}
	return out, nil
}

// Inspect returns one container by name, ID or unique ID prefix;
// runtime.ErrNotFound when it does not exist.
func (r *Runtime) Inspect(ctx context.Context, idOrName string) (runtime.Container, error) {
	data, err := containers.Inspect(r.call(ctx), idOrName, new(containers.InspectOptions).WithSize(false))
	if err != nil {
		return runtime.Container{}, r.containerError("inspect", idOrName, err)
	}
	return inspected(data), nil
}

// inspected maps Podman's inspect data: the image digest falls back to the
// image ID (Podman leaves the digest empty for an image it has none for).
func inspected(data *define.InspectContainerData) runtime.Container {
	c := runtime.Container{
		ID:           data.ID,
		Name:         data.Name,
		Image:        data.ImageName,
		RestartCount: int(data.RestartCount),
		ImageDigest:  data.ImageDigest,
	}
	if c.ImageDigest == "" {
		c.ImageDigest = data.Image
	}
	if data.Config != nil {
		c.Labels = data.Config.Labels
	}
	if data.State != nil {
		c.State = state(data.State.Status)
		c.ExitCode = int(data.State.ExitCode)
		if data.State.StartedAt.Unix() > 0 {
			c.StartedAt = data.State.StartedAt
		}
		if data.State.FinishedAt.Unix() > 0 {
			c.FinishedAt = data.State.FinishedAt
		}
		c.Health = health(data.State.Health)
		c.OOMKilled = data.State.OOMKilled
	}
	if data.HostConfig != nil {
		c.Ports = portBindings(data.HostConfig.PortBindings)
	}
	return c
}

// health reads Podman's health results: nil when the container has no
// health check (Podman 4 reports an empty status then).
func health(h *define.HealthCheckResults) *runtime.Health {
	if h == nil || h.Status == "" {
		return nil
	}
	out := &runtime.Health{Status: h.Status, FailingStreak: h.FailingStreak, Checks: len(h.Log)}
	if n := len(h.Log); n > 0 {
		last := h.Log[n-1]
		out.LastExitCode = last.ExitCode
		out.LastOutput = last.Output
		out.LastStart, _ = time.Parse(time.RFC3339Nano, last.Start)
		out.LastEnd, _ = time.Parse(time.RFC3339Nano, last.End)
	}
	return out
}

// RunHealthCheck runs the container's health check once (Podman's
// `healthcheck run`): Podman records the result and updates the
// container's health as its own timer would. Podman schedules checks with
// systemd timers; on a host without systemd none run unless someone runs
// them, which is what this is for. A check that fails is not an error;
// runtime.ErrNotFound when the container does not exist.
func (r *Runtime) RunHealthCheck(ctx context.Context, id string) error {
	if _, err := containers.RunHealthCheck(r.call(ctx), id, nil); err != nil {
		return r.containerError("run the health check of", id, err)
	}
	return nil
}

// RestartPolicy returns the restart policy Podman stored for a container
// ("" or "no" when none); runtime.ErrNotFound when it does not exist. It is
// not part of runtime.Runtime: runtime.Container does not report the
// policy.
func (r *Runtime) RestartPolicy(ctx context.Context, idOrName string) (string, error) {
	data, err := containers.Inspect(r.call(ctx), idOrName, nil)
	if err != nil {
		return "", r.containerError("inspect", idOrName, err)
	}
	if data.HostConfig == nil || data.HostConfig.RestartPolicy == nil {
		return "", nil
	}
	return data.HostConfig.RestartPolicy.Name, nil
}

// portBindings reads Podman's "8080/tcp" → [{HostIP, HostPort}] map, sorted
// for stable comparisons.
func portBindings(m map[string][]define.InspectHostPort) []runtime.PortBinding {
	var out []runtime.PortBinding
	for key, hosts := range m {
		portStr, proto, _ := strings.Cut(key, "/")
		cport, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			continue
		}
		for _, h := range hosts {
			hport, err := strconv.ParseUint(h.HostPort, 10, 16)
			if err != nil {
				continue
			}
			out = append(out, runtime.PortBinding{HostPort: uint16(hport), ContainerPort: uint16(cport), Protocol: protocol(proto)})
		}
	}
	slices.SortFunc(out, func(a, b runtime.PortBinding) int {
		if a.HostPort != b.HostPort {
			return int(a.HostPort) - int(b.HostPort)
		}
		if a.ContainerPort != b.ContainerPort {
			return int(a.ContainerPort) - int(b.ContainerPort)
		}
		return strings.Compare(a.Protocol, b.Protocol)
	})
	return out
}

func protocol(p string) string {
	if p == "" {
		return "tcp"
	}
	return p
}

// state maps Podman's status words to runtime states.
func state(status string) runtime.State {
	switch status {
	case "running":
		return runtime.StateRunning
	case "created", "configured", "initialized":
		return runtime.StateCreated
	case "exited", "stopped":
		return runtime.StateExited
	default:
		return runtime.StateOther
	}
}

// ImageExists reports whether the image is present locally.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	ok, err := images.Exists(r.call(ctx), ref, nil)
	if err != nil {
		return false, redact(fmt.Errorf("podman: image exists %s: %w", ref, err), nil)
	}
	return ok, nil
}

// Pull fetches an image. auth, when not nil, travels in this request's
// X-Registry-Auth header only; when nil the pull is anonymous unless the
// host's Podman holds credentials of its own (the agent never stores any).
// Every failure but a cancelled pull and an engine that cannot be reached
// is a *runtime.PullError: a refused credential is runtime.ErrAuth, a
// registry without the image runtime.ErrImageNotFound, a registry that
// cannot be reached or answers with a server error
// runtime.ErrRegistryUnavailable (see pullError).
func (r *Runtime) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	opts := new(images.PullOptions).WithQuiet(true)
	var secrets []string
	if auth != nil {
		opts = opts.WithUsername(auth.Username).WithPassword(auth.Password)
		secrets = append(secrets, auth.Password)
	}
	_, err := images.Pull(r.call(ctx), ref, opts)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return redact(fmt.Errorf("podman: pull %s: %w", ref, ctx.Err()), ctx.Err(), secrets...)
	case runtime.IsUnavailable(err): // the engine did not answer: not the registry's doing
		return redact(fmt.Errorf("podman: pull %s: %w", ref, err), nil, secrets...)
	default:
		return pullError(ref, auth, err, secrets)
	}
}

// Create creates (does not start) a container: runtime.ErrNameInUse when the
// name is taken, runtime.ErrImageNotFound when the image is not present
// locally (Create never pulls). An empty restart policy is "no".
func (r *Runtime) Create(ctx context.Context, cs runtime.ContainerSpec) (string, error) {
	s := specgen.NewSpecGenerator(cs.Image, false)
	s.Name = cs.Name
	s.Env = cs.Env
	s.Labels = cs.Labels
	s.RestartPolicy = cs.RestartPolicy
	if s.RestartPolicy == "" {
		s.RestartPolicy = runtime.RestartNo
	}
	for _, p := range cs.Ports {
		s.PortMappings = append(s.PortMappings, nettypes.PortMapping{
			HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: protocol(p.Protocol),
		})
	}
	for _, m := range cs.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		s.Mounts = append(s.Mounts, spec.Mount{
			Type: "bind", Source: m.HostPath, Destination: m.ContainerPath, Options: []string{"rbind", mode},
		})
	}
	if hc := cs.HealthCheck; hc != nil {
		s.HealthConfig = &manifest.Schema2HealthConfig{
			Test:        append([]string{"CMD"}, hc.Command...),
			Interval:    hc.Interval,
			Timeout:     hc.Timeout,
			StartPeriod: hc.StartPeriod,
			Retries:     hc.Retries,
		}
	}
	secrets := make([]string, 0, len(cs.Env))
	for _, v := range cs.Env {
		secrets = append(secrets, v)
	}

	resp, err := containers.CreateWithSpec(r.call(ctx), s, nil)
	switch {
	case err == nil:
		return resp.ID, nil
	case hasCause(err, causeNameInUse):
		return "", redact(fmt.Errorf("podman: create %s: %w: %w", cs.Name, runtime.ErrNameInUse, err), runtime.ErrNameInUse, secrets...)
	case hasCause(err, causeImageNotKnown), hasCause(err, causeNoSuchImage):
		return "", redact(fmt.Errorf("podman: create %s: image %s is not present locally (pull it first): %w: %w",
			cs.Name, cs.Image, runtime.ErrImageNotFound, err), runtime.ErrImageNotFound, secrets...)
	default:
		return "", redact(fmt.Errorf("podman: create %s: %w", cs.Name, err), nil, secrets...)
	}
}

// Start starts a created or exited container; starting a running one does
// nothing. It fails (without a sentinel) when a host port is in use.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := containers.Start(r.call(ctx), id, nil); err != nil {
		return r.containerError("start", id, err)
	}
	return nil
}

// Wait blocks until the container has exited and returns its exit code; at
// once when it already has.
func (r *Runtime) Wait(ctx context.Context, id string) (int, error) {
	code, err := containers.Wait(r.call(ctx), id, new(containers.WaitOptions).WithConditions([]string{"exited", "stopped"}))
	if err != nil {
		return -1, r.containerError("wait", id, err)
	}
	return int(code), nil
}

// Stop sends SIGTERM and SIGKILL after timeout (rounded up to whole
// seconds, Podman's unit); stopping a container that does not run does
// nothing. The request lasts as long as the stop, so ctx must allow the
// timeout.
func (r *Runtime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	secs := uint(0)
	if timeout > 0 {
		secs = uint(min(math.Ceil(timeout.Seconds()), math.MaxUint32))
	}
	if err := containers.Stop(r.call(ctx), id, new(containers.StopOptions).WithTimeout(secs)); err != nil {
		return r.containerError("stop", id, err)
	}
	return nil
}

// Remove removes a container with its anonymous volumes. force kills a
// running container at once (SIGKILL, no grace period: callers Stop first
// when they want one); without force a running container is refused.
func (r *Runtime) Remove(ctx context.Context, id string, force bool) error {
	opts := new(containers.RemoveOptions).WithVolumes(true).WithForce(force)
	if force {
		opts = opts.WithTimeout(0)
	}
	if _, err := containers.Remove(r.call(ctx), id, opts); err != nil {
		return r.containerError("remove", id, err)
	}
	return nil
}

// containerError maps a bindings error about one container.
func (r *Runtime) containerError(op, id string, err error) error {
	if isNoSuchContainer(err) {
		return redact(fmt.Errorf("podman: %s %s: %w: %w", op, id, runtime.ErrNotFound, err), runtime.ErrNotFound)
	}
	return redact(fmt.Errorf("podman: %s %s: %w", op, id, err), nil)
}
