// Package runtime is the agent's seam to a container engine: the Runtime
// interface the reconciler drives, its value types and its typed errors.
// Implementations: runtime/podman (the Podman API through the
// containers/podman/v5 bindings) and runtime/sim (an in-memory engine for
// scale tests and `fleet dev` without Podman); both pass the shared
// conformance suite in runtime/runtimetest.
//
// Invariants: a Runtime never logs or returns a registry password or an
// environment value; errors name the container or image, never the secret.
// The one exception is what a container prints itself: Health.LastOutput
// and the lines of Logs are returned as the engine recorded them, and
// their reader filters them. Watch streams a container's deaths, starts,
// health checks and removals (ContainerEvent) through a bounded channel
// that drops the oldest events for an EventLost rather than block the
// engine's side (Deliver).
// Agent packages, cmd/fleet-agent and package dev (the devices of
// `fleet dev`) may import it; it never links Kubernetes.
package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
)

// State of a container.
type State string

// Container states.
const (
	StateCreated State = "created"
	StateRunning State = "running"
	StateExited  State = "exited"
	StateOther   State = "other" // paused, stopping, unknown…
)

// Restart policies, as Podman names them.
const (
	RestartNo            = "no"
	RestartAlways        = "always"
	RestartOnFailure     = "on-failure"
	RestartUnlessStopped = "unless-stopped"
)

// PortBinding publishes a container port on the host.
type PortBinding struct {
	HostPort      uint16
	ContainerPort uint16
	// Protocol is "tcp" (default) or "udp".
	Protocol string
}

// Mount binds a host path into the container.
type Mount struct {
	HostPath      string
	ContainerPath string
	ReadOnly      bool
}

// ContainerSpec is everything needed to create a container.
type ContainerSpec struct {
	Name  string
	Image string
	// Env holds resolved values, secret values included: never log it.
	Env           map[string]string
	Ports         []PortBinding
	Mounts        []Mount
	RestartPolicy string
	Labels        map[string]string
	// HealthCheck, when set, is the check the engine keeps for the
	// container (see Runtime.RunHealthCheck); nil: none.
	HealthCheck *HealthCheck
}

// HealthCheck is a container's health check with the engine's semantics:
// the container is HealthStarting until a check passes (HealthHealthy),
// and HealthUnhealthy once Retries checks in a row failed after
// StartPeriod; a failure within the start period does not count.
type HealthCheck struct {
	// Command runs in the container in exec form (program, arguments);
	// exit code 0 is a pass.
	Command []string
	// Interval between checks, Timeout of one check (a check that
	// outlives it fails), StartPeriod after a start during which failures
	// do not count: all set by the caller (the engine's own defaults are
	// never relied on).
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	// Retries is how many failures in a row make the container unhealthy.
	Retries int
}

// Health statuses, as Podman names them.
const (
	HealthStarting  = "starting"
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
)

// Health is a container's health as the engine reports it.
type Health struct {
	// Status is HealthStarting, HealthHealthy or HealthUnhealthy.
	Status string
	// FailingStreak is how many checks in a row failed (and counted).
	FailingStreak int
	// Checks is how many checks the engine keeps in its log (Podman keeps
	// the last five); 0: none ran since the container was created.
	Checks int
	// LastStart and LastEnd are when the last check ran (zero when none
	// ran, or the runtime has no clock).
	LastStart time.Time
	LastEnd   time.Time
	// LastExitCode is the last check's exit code (0: it passed).
	LastExitCode int
	// LastOutput is what the last check printed, as the container printed
	// it: untrusted, unbounded text that may hold anything the container
	// can read. Never report it unfiltered.
	LastOutput string
}

// Container is a container as the engine reports it.
type Container struct {
	ID       string
	Name     string
	Image    string
	Labels   map[string]string
	State    State
	ExitCode int
	Ports    []PortBinding
	// StartedAt is when the container was last started; zero when it never
	// was or the runtime does not say (the simulated runtime without a
	// clock). The reconciler bounds an init container it finds running by
	// the time left since then.
	StartedAt time.Time
	// FinishedAt is when the container last exited as the engine saw it;
	// zero when it never did or the runtime does not say. After a reboot
	// Podman shows a container that was running as exited with its last
	// exit code but no new FinishedAt: before StartedAt (see
	// ExitUnrecorded).
	FinishedAt time.Time
	// Health is the container's health when it has a health check; nil
	// when it has none. Only Inspect reports it (List leaves it nil).
	Health *Health
	// RestartCount is how many times the engine restarted the container
	// by its restart policy since it was last started by a Start call
	// (which sets it back to 0, as a reboot does). It counts policy
	// restarts only, not deaths: a container whose policy keeps it down
	// died without a restart. Only Inspect reports it (List leaves it 0:
	// Podman 4.3's list does not carry it; a newer StartedAt in List
	// tells a restart there).
	RestartCount int
	// OOMKilled reports that the kernel's OOM killer ended the container.
	// Like Podman's, it is never cleared once set (a later restart or
	// exit leaves it true): a reader compares it with what it saw before.
	// Only Inspect reports it (List leaves it false).
	OOMKilled bool
	// ImageDigest identifies the image the container runs: its manifest
	// digest ("sha256:…") when the engine knows it, otherwise the image
	// ID. Only Inspect reports it (List leaves it empty: Podman's list
	// does not carry the digest).
	ImageDigest string
}

// ExitSkew is how far before a container's StartedAt its FinishedAt may
// lie and still be the exit of that start. Podman records the start time
// after the OCI runtime has started the process, and the finish time from
// the exit file conmon writes when the process ends: a container that
// exits at once (an init container that has nothing to do) shows a
// FinishedAt a few milliseconds before its StartedAt (more when the host
// is loaded and Podman waits for the CPU between the two), and its list,
// which counts whole seconds, may put the two in neighbouring seconds.
// Five seconds cover both with room. The price: a host that went down
// within that long of a restart that followed a recorded exit reads as
// that exit, with that exit's code; the reconciler's decisions come out
// the same then (a policy that restarted the container restarts it again,
// and the agent never starts an init container a second time).
const ExitSkew = 5 * time.Second

// ExitUnrecorded reports whether c is exited without the engine having seen
// it exit since its last start (FinishedAt more than ExitSkew before
// StartedAt, or none): the host went down while it ran, and its ExitCode
// is stale. False when the runtime reports no start time.
func (c Container) ExitUnrecorded() bool {
	return c.State == StateExited && !c.StartedAt.IsZero() && c.FinishedAt.Before(c.StartedAt.Add(-ExitSkew))
}

// RegistryAuth is a pull credential, passed per call and never stored,
// logged or written to a file.
type RegistryAuth struct {
	Username string
	Password string
}

// String hides the password.
func (a RegistryAuth) String() string { return "RegistryAuth{" + a.Username + ", ***}" }

// GoString hides the password.
func (a RegistryAuth) GoString() string { return a.String() }

// Runtime is what the agent needs of a container engine.
type Runtime interface {
	// List returns every container of the engine, the agent's and foreign
	// ones (preflight checks names and ports against all of them).
	List(ctx context.Context) ([]Container, error)
	// Inspect returns one container; ErrNotFound when it does not exist.
	Inspect(ctx context.Context, idOrName string) (Container, error)
	// ImageExists reports whether the image is present locally.
	ImageExists(ctx context.Context, ref string) (bool, error)
	// Pull fetches an image; auth may be nil. A failure the registry (or
	// the way to it) caused is a *PullError: a refused credential is
	// ErrAuth; a missing image is ErrImageNotFound; a registry that cannot
	// be reached or answers with a server error is ErrRegistryUnavailable.
	Pull(ctx context.Context, ref string, auth *RegistryAuth) error
	// ImageDigest returns the manifest digest ("sha256:…") the engine
	// recorded when it pulled the local image ref from ref's repository:
	// the digest of what it actually pulled, whatever the registry's tag
	// says now. "" when the local image has no digest from that
	// repository (an image built on the device may have one the engine
	// made, which no registry holds); ErrImageNotFound when ref is not
	// present locally.
	ImageDigest(ctx context.Context, ref string) (string, error)
	// Create creates (does not start) a container; ErrNameInUse when the
	// name is taken.
	Create(ctx context.Context, spec ContainerSpec) (id string, err error)
	// Start starts a created or exited container.
	Start(ctx context.Context, id string) error
	// Wait blocks until the container exits and returns its exit code.
	Wait(ctx context.Context, id string) (exitCode int, err error)
	// Stop asks the container to stop and kills it after timeout.
	Stop(ctx context.Context, id string, timeout time.Duration) error
	// Remove removes a container; force removes a running one.
	Remove(ctx context.Context, id string, force bool) error
	// RunHealthCheck runs the container's health check once, now, as the
	// engine's own schedule would, and updates its Health (read it with
	// Inspect). ErrNotFound when the container does not exist; an error
	// when it has no health check or does not run. A check that fails is
	// not an error.
	RunHealthCheck(ctx context.Context, id string) error
	// Watch streams the events of the containers that carry every label
	// of labels (every container when labels is empty): deaths, starts,
	// health check results and removals, in the order the engine saw
	// them, from the call on (never past events). The channel has
	// capacity WatchBuffer; a reader that falls behind loses the oldest
	// waiting events, replaced by an EventLost (see Deliver), and must
	// then List. The channel is closed when ctx ends; it is also closed
	// when the engine's stream ends without ctx ending (the engine
	// restarted or went away), and then its last event is an EventLost.
	// Either way the reader watches again to go on. An error, and no
	// channel, when the engine cannot be watched (ErrUnavailable when it
	// cannot be reached).
	Watch(ctx context.Context, labels map[string]string) (<-chan ContainerEvent, error)
	// Logs returns the last tail lines the container printed, stdout and
	// stderr interleaved as printed, oldest first, without their line
	// ends, each cut at MaxLogLine bytes; tail <= 0 means every line. The
	// lines are what the container
	// printed: untrusted, unbounded text that may hold secrets. Never
	// report them unfiltered. ErrNotFound when the container does not
	// exist.
	Logs(ctx context.Context, id string, tail int) ([]string, error)
}

// ErrNotFound: no such container.
var ErrNotFound = errors.New("container not found")

// ErrNameInUse: a container of that name exists.
var ErrNameInUse = errors.New("container name in use")

// ErrAuth: the registry refused the credentials (or anonymous access).
var ErrAuth = errors.New("registry authentication failed")

// ErrImageNotFound: the registry has no such image.
var ErrImageNotFound = errors.New("image not found")

// ErrRegistryUnavailable: the engine could not reach the registry to pull
// (connection refused or reset, DNS failure, timeout, TLS handshake
// timeout) or the registry answered with a server error (5xx). It says
// nothing about the workload and may pass: the agent retries. It is not
// ErrUnavailable (the engine itself answered) and IsUnavailable is false
// for it.
var ErrRegistryUnavailable = errors.New("registry unavailable")

// ErrUnavailable: the container engine cannot be reached (its API socket
// refuses or drops the connection). It says nothing about the workload: the
// agent retries instead of reporting a failure.
var ErrUnavailable = errors.New("container engine unavailable")

// IsUnavailable reports whether err means the engine could not be reached
// rather than that it refused the request: ErrUnavailable, or a transport
// error (a failed dial, a refused or reset connection, a connection closed
// mid-answer).
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	return errors.Is(err, ErrUnavailable) || errors.As(err, &op) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}

// How a pull authenticated, as PullError.Auth says it.
const (
	// PullAnonymously: no credential was sent.
	PullAnonymously = "anonymously"
	// pullWithSecret is followed by the registry authority.
	pullWithSecret = "with the pull secret for "
)

// Causes of a failed pull: the first words of PullError.Cause, the same on
// every runtime so that a report reads the same whatever the engine. The
// engine's detail follows in parentheses.
const (
	PullCauseNotFound    = "the image does not exist in the registry"
	PullCauseAuth        = "the registry refused the credentials"
	PullCauseNoSuchHost  = "the registry's host name does not resolve"
	PullCauseRefused     = "the registry refused the connection"
	PullCauseUnreachable = "the registry could not be reached"
	PullCauseServerError = "the registry answered with a server error"
	PullCauseTLS         = "the registry's TLS certificate is not trusted"
	PullCauseOther       = "the engine could not pull it"
)

// PullError is a failed pull as a user reads it: one line that names the
// image, the registry, how the pull authenticated and why it failed, never
// a secret. Runtimes return it from Pull for every failure the registry
// (or the way to it) caused; a cancelled pull and an engine that cannot be
// reached are not PullErrors.
type PullError struct {
	// Ref is the image reference pulled.
	Ref string
	// Authority is the registry the pull went to (ImageAuthority of Ref).
	Authority string
	// Auth is what was tried: PullAnonymously, or "with the pull secret
	// for <authority>". Never the credential.
	Auth string
	// Cause is one of the PullCause phrases, followed by the engine's
	// detail in parentheses when there is one, on one line and without
	// the engine's wrapping ("podman: pull …: initializing source …").
	Cause string
	// Hint, when set, says what to check ("check the image name and
	// tag").
	Hint string
	// Err classifies the failure for errors.Is: ErrImageNotFound, ErrAuth
	// or ErrRegistryUnavailable; nil for a failure that is none of them
	// (PullCauseTLS, PullCauseOther). It is never the engine's error,
	// whose text may hold a secret.
	Err error
}

// Error is the one-line message: "image <ref> could not be pulled from
// <authority> (<auth>): <cause>[; <hint>]".
func (e *PullError) Error() string {
	msg := "image " + e.Ref + " could not be pulled from " + e.Authority + " (" + e.Auth + "): " + e.Cause
	if e.Hint != "" {
		msg += "; " + e.Hint
	}
	return msg
}

// Unwrap returns the sentinel that classifies the failure (nil: none).
func (e *PullError) Unwrap() error { return e.Err }

// ImageAuthority returns the normalised registry authority of an image
// reference: the host in lower case with its port, "docker.io" for images
// without a registry host (and for Docker Hub's aliases).
func ImageAuthority(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if !found || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return "docker.io"
	}
	return NormaliseAuthority(first)
}

// NormaliseAuthority lower-cases a registry authority and maps Docker Hub's
// aliases to docker.io. The port is kept: hub.example:5000 and hub.example
// are different authorities.
func NormaliseAuthority(a string) string {
	a = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(a, "https://"), "http://"), "/"))
	switch a {
	case "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com":
		return "docker.io"
	}
	return a
}

// NewPullError returns the *PullError of a failed pull of ref: auth is the
// credential sent (nil: anonymous; only whether it was sent is kept), err
// the sentinel that classifies the failure (nil: none), cause one of the
// PullCause phrases and detail the engine's own words for it ("manifest
// unknown"), shown in parentheses when not empty. The hint follows from
// the cause.
func NewPullError(ref string, auth *RegistryAuth, err error, cause, detail string) *PullError {
	authority := ImageAuthority(ref)
	tried := PullAnonymously
	if auth != nil {
		tried = pullWithSecret + authority
	}
	e := &PullError{Ref: ref, Authority: authority, Auth: tried, Cause: cause, Err: err}
	if detail != "" {
		e.Cause += " (" + detail + ")"
	}
	switch {
	case cause == PullCauseNotFound:
		e.Hint = "check the image name and tag"
	case cause == PullCauseAuth && auth == nil:
		e.Hint = "give the service an image_pull_secret for " + authority
	case cause == PullCauseAuth:
		e.Hint = "check the pull secret's username and password"
	case cause == PullCauseNoSuchHost:
		e.Hint = "check the registry host in the image name"
	case authority == "localhost":
		e.Hint = "check the image name: a localhost/ image is one built or loaded on the device, and this device does not have it"
	case cause == PullCauseTLS:
		e.Hint = "the device must trust the registry's certificate authority"
	}
	return e
}
