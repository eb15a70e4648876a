// Package runtimetest owns the one conformance suite every runtime.Runtime
// implementation passes: runtime/podman against the real Podman service and
// runtime/sim in memory. The suite states the behaviour the reconciler
// relies on (typed errors, states, exit codes, stop timeout, secrecy of
// passwords and environment values); Fixture carries what differs per
// engine.
//
// Invariants: every container the suite creates carries Fixture.Labels, so an
// engine's test harness can remove it; the suite never prints an environment
// value or a password, and fails a case when one appears in any error the
// runtime returned.
//
// Only tests import this package (internal/hygiene checks). It links no
// Kubernetes code.
package runtimetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// The environment check: Fixture.EnvCheck's containers exit 0 when the
// variable EnvCheckVar holds exactly EnvCheckValue, and 1 otherwise. The
// value stands for a resolved secret: it never appears in test output.
const (
	EnvCheckVar   = "FLEET_CONFORMANCE_CHECK"
	EnvCheckValue = "conformance-env-value-5b8e1d"
)

// The mount check: Fixture.MountCheck's containers read MountMarker in the
// folder mounted at MountPath and try to write next to it. They exit 0 when
// the file reads MountMarkerContent and the write works, 20 when the write
// fails (a read-only mount) and 10 when the file is missing or different.
const (
	MountPath          = "/fleet-conformance-mount"
	MountMarker        = "marker"
	MountMarkerContent = "mounted"
)

// Exit codes of the mount check.
const (
	MountCheckMissing  = 10
	MountCheckReadOnly = 20
)

// Fixture is what the suite needs of one engine. Images named here must be
// present locally (ImageExists true) unless said otherwise.
type Fixture struct {
	// Labels go on every container the suite creates (the test harness
	// removes containers by them).
	Labels map[string]string
	// Running is an image whose containers run until stopped and end
	// promptly on SIGTERM.
	Running string
	// IgnoresTerm is an image whose containers run until killed: they
	// ignore SIGTERM, so a stop waits for its whole timeout.
	IgnoresTerm string
	// Exit3 is an image whose containers exit with code 3 right after they
	// start.
	Exit3 string
	// EnvCheck is an image whose containers exit 0 when EnvCheckVar holds
	// EnvCheckValue and 1 otherwise.
	EnvCheck string
	// MountCheck is an image whose containers run the mount check (see
	// MountPath).
	MountCheck string
	// HostPort returns a host port free for publishing.
	HostPort func(t *testing.T) uint16
	// Registry returns images in a registry that requires credentials; nil
	// skips the pull cases. It may skip t when the registry is missing.
	Registry func(t *testing.T) Registry
	// Unreachable returns a reference on a registry that refuses
	// connections (the engine answers, the registry does not); nil skips
	// that part of the PullError case.
	Unreachable func(t *testing.T) string
	// CreateForeign creates and starts a container the way something other
	// than the agent would: not through the Runtime, without the agent's
	// labels (only what the harness needs for cleanup). It returns its name.
	CreateForeign func(t *testing.T) string
	// RestartPolicy returns the restart policy the engine stored for the
	// container (runtime.Container does not report it). Nil skips that case.
	RestartPolicy func(t *testing.T, id string) string
	// HealthPasses and HealthFails are health check commands that pass and
	// fail in the Running image's containers.
	HealthPasses []string
	HealthFails  []string
	// Prints is an image whose containers print PrintedLines, the first
	// on stderr and the others after it on stdout, then run until
	// stopped (ending promptly on SIGTERM). Empty skips the Logs case.
	Prints string
	// Crashable is an image whose containers run until Crash makes their
	// process exit with CrashExitCode by itself: not a stop, so the
	// restart policy applies. Empty skips the restart count case.
	Crashable string
	// Crash makes a running container of Crashable exit with
	// CrashExitCode, as a crash does.
	Crash func(t *testing.T, id string)
}

// PrintedLines are what Fixture.Prints's containers print.
var PrintedLines = []string{"conformance: on stderr", "conformance: line 1", "conformance: line 2", "conformance: line 3"}

// CrashExitCode is the exit code of a Fixture.Crashable container that
// Fixture.Crash ended.
const CrashExitCode = 2

// Registry names images in a registry that requires credentials.
type Registry struct {
	// Private is pushed to the registry and absent locally; pulling it
	// needs Auth.
	Private string
	// Auth is the pull credential for Private and Missing.
	Auth runtime.RegistryAuth
	// Missing is a reference the registry does not have.
	Missing string
}

// Run runs the conformance suite. newRuntime is called once per case, with
// the case's t; it returns a Runtime and the fixture for that engine.
func Run(t *testing.T, newRuntime func(t *testing.T) (runtime.Runtime, Fixture)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt, fx := newRuntime(t)
			s := &suite{t: t, fx: fx, rt: &recorder{rt: rt}}
			s.secrets = []string{EnvCheckValue}
			t.Cleanup(s.checkErrorsHoldNoSecret)
			tc.run(s)
		})
	}
}

type testCase struct {
	name string
	run  func(s *suite)
}

var cases = []testCase{
	{"a created and started container is inspected running with its labels, ports and env", testCreateStartInspect},
	{"an environment value reaches the container's process", testEnvApplied},
	{"a host folder is mounted, read-only when the spec says so, and a missing one fails Create", testMounts},
	{"Wait returns when its context ends before the container exits", testWaitContext},
	{"creating a second container with a taken name is ErrNameInUse", testNameInUse},
	{"creating from an image that is not present locally is ErrImageNotFound", testCreateMissingImage},
	{"Wait returns the exit code of a container that exits with 3", testWaitExitCode},
	{"a container that exits at once reads as exited with its exit recorded, listed and inspected", testQuickExitRecorded},
	{"Stop of a container that ignores SIGTERM returns after the timeout with the container exited", testStopIgnoresTerm},
	{"Stop of a container that honours SIGTERM leaves it exited", testStopHonoursTerm},
	{"Stop of a container that is not running is not an error", testStopNotRunning},
	{"Remove with force removes a running container", testRemoveForce},
	{"Remove without force of a running container fails and keeps it", testRemoveRunningNoForce},
	{"Inspect, Start, Stop, Wait and Remove of a missing container are ErrNotFound", testMissingContainer},
	{"Inspect finds a container by name and by ID", testInspectByNameAndID},
	{"List includes foreign containers created without the agent's labels", testListForeign},
	{"ImageExists is true for a local image and false for an absent one", testImageExists},
	{"Pull of a private image with the right credentials works", testPullWithCredentials},
	{"Pull of a private image without or with wrong credentials is ErrAuth", testPullRefused},
	{"Pull of an image the registry does not have is ErrImageNotFound", testPullMissing},
	{"ImageDigest is the digest a pulled image came with, ErrImageNotFound for an absent image", testImageDigestOfPull},
	{"a failed pull is one PullError line naming the image, the registry, what was tried and why", testPullError},
	{"the restart policy of the spec is applied", testRestartPolicy},
	{"starting a container whose host port a running container holds fails and leaves it not running", testPortConflict},
	{"a started exited container runs again", testRestartExited},
	{"a passing health check makes the container healthy once it runs", testHealthPasses},
	{"a failing health check makes the container unhealthy after retries failures in a row", testHealthFails},
	{"a failure within the start period does not count", testHealthStartPeriod},
	{"a container without a health check reports no health and cannot run one", testNoHealthCheck},
	{"no error carries a password or an environment value", testErrorsHoldNoSecret},
	{"a watch delivers a start, then the death with its exit code", testWatchDied},
	{"a watch delivers only the events of containers carrying all its labels", testWatchLabels},
	{"a watch's channel is closed when its context ends", testWatchClosed},
	{"a watch delivers each health check run", testWatchHealth},
	{"a container its policy restarts after a crash counts the restart, and both are watched", testPolicyRestart},
	{"Logs returns the last lines printed on stdout and stderr, oldest first", testLogsTail},
	{"Inspect reports the image digest, the same for the same image", testImageDigest},
	{"the image store reports its free space and size", testImageStoreSpace},
	{"DeleteImage removes an image no container uses and refuses one a container uses", testDeleteImage},
	{"MissingLayers sizes the layers a pull lacks and none once it is pulled and fails as a pull does", testMissingLayers},
}

// suite is one case's state.
type suite struct {
	t  *testing.T
	fx Fixture
	rt *recorder
	// secrets must never appear in an error the runtime returns.
	secrets []string
}

// ctx bounds one step of a case.
func (s *suite) ctx() context.Context {
	ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Minute)
	s.t.Cleanup(cancel)
	return ctx
}

// name returns a unique container name.
func (s *suite) name(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return "conformance-" + prefix + "-" + hex.EncodeToString(b)
}

// spec returns a spec for image with the fixture's labels and a unique name.
func (s *suite) spec(prefix, image string) runtime.ContainerSpec {
	return runtime.ContainerSpec{
		Name:   s.name(prefix),
		Image:  image,
		Labels: maps.Clone(s.fx.Labels),
	}
}

func (s *suite) create(spec runtime.ContainerSpec) string {
	s.t.Helper()
	id, err := s.rt.Create(s.ctx(), spec)
	if err != nil {
		s.t.Fatalf("Create %s from %s: %v", spec.Name, spec.Image, err)
	}
	if id == "" {
		s.t.Fatalf("Create %s returned an empty ID", spec.Name)
	}
	return id
}

func (s *suite) start(id string) {
	s.t.Helper()
	if err := s.rt.Start(s.ctx(), id); err != nil {
		s.t.Fatalf("Start %s: %v", short(id), err)
	}
}

func (s *suite) run(spec runtime.ContainerSpec) string {
	s.t.Helper()
	id := s.create(spec)
	s.start(id)
	return id
}

func (s *suite) inspect(id string) runtime.Container {
	s.t.Helper()
	c, err := s.rt.Inspect(s.ctx(), id)
	if err != nil {
		s.t.Fatalf("Inspect %s: %v", short(id), err)
	}
	return c
}

// waitState polls Inspect until the container is in want or a minute passed.
func (s *suite) waitState(id string, want runtime.State) runtime.Container {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c := s.inspect(id)
		if c.State == want {
			return c
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("container %s is %s after a minute, want %s", short(id), c.State, want)
		}
		// Podman answers an inspect in milliseconds; a short yield keeps the
		// poll from spinning without sleeping for a fixed guess.
		select {
		case <-s.t.Context().Done():
			s.t.Fatal("test ended while waiting")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *suite) wait(id string) int {
	s.t.Helper()
	code, err := s.rt.Wait(s.ctx(), id)
	if err != nil {
		s.t.Fatalf("Wait %s: %v", short(id), err)
	}
	return code
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// checkErrorsHoldNoSecret fails the case when any error the runtime returned
// contains a secret. It names the method, never the secret.
func (s *suite) checkErrorsHoldNoSecret() {
	for _, rec := range s.rt.errors() {
		for _, secret := range s.secrets {
			if secret != "" && strings.Contains(rec.err.Error(), secret) {
				s.t.Errorf("an error returned by %s contains a password or an environment value", rec.method)
			}
		}
	}
}

func testCreateStartInspect(s *suite) {
	port := s.fx.HostPort(s.t)
	spec := s.spec("inspect", s.fx.Running)
	spec.Labels["io.nationtech.harmony-fleet.conformance"] = "inspect"
	spec.Env = map[string]string{"FLEET_PLAIN": "plain-value-3f9"}
	s.secrets = append(s.secrets, "plain-value-3f9")
	spec.Ports = []runtime.PortBinding{{HostPort: port, ContainerPort: 8080, Protocol: "tcp"}}
	id := s.create(spec)

	c := s.inspect(id)
	if c.State != runtime.StateCreated {
		s.t.Errorf("after Create the state is %s, want %s", c.State, runtime.StateCreated)
	}
	s.start(id)
	s.start(id) // starting a running container does nothing
	c = s.inspect(id)
	if c.State != runtime.StateRunning {
		s.t.Fatalf("after Start the state is %s, want %s", c.State, runtime.StateRunning)
	}
	if c.ID != id {
		s.t.Errorf("Inspect ID = %s, Create returned %s", c.ID, id)
	}
	if c.Name != spec.Name {
		s.t.Errorf("Inspect Name = %q, want %q", c.Name, spec.Name)
	}
	if c.Image != spec.Image {
		s.t.Errorf("Inspect Image = %q, want %q", c.Image, spec.Image)
	}
	for k, v := range spec.Labels {
		if c.Labels[k] != v {
			s.t.Errorf("label %s = %q, want %q", k, c.Labels[k], v)
		}
	}
	want := runtime.PortBinding{HostPort: port, ContainerPort: 8080, Protocol: "tcp"}
	if !slices.Contains(c.Ports, want) {
		s.t.Errorf("Inspect Ports = %+v, want them to contain %+v", c.Ports, want)
	}

	list, err := s.rt.List(s.ctx())
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	i := slices.IndexFunc(list, func(l runtime.Container) bool { return l.ID == id })
	if i < 0 {
		s.t.Fatalf("List does not include %s", spec.Name)
	}
	if l := list[i]; l.Name != spec.Name || l.State != runtime.StateRunning || l.Labels["io.nationtech.harmony-fleet.conformance"] != "inspect" || !slices.Contains(l.Ports, want) {
		s.t.Errorf("List reports %+v, want name %s, running, its labels and port %+v", l, spec.Name, want)
	}
}

func testEnvApplied(s *suite) {
	tests := []struct {
		name  string
		value string
		want  int
	}{
		{"the expected value", EnvCheckValue, 0},
		{"another value", "other-" + EnvCheckValue[:8], 1},
	}
	for _, tt := range tests {
		spec := s.spec("env", s.fx.EnvCheck)
		spec.Env = map[string]string{EnvCheckVar: tt.value}
		id := s.run(spec)
		if got := s.wait(id); got != tt.want {
			// The exit code says whether the value arrived; the value itself
			// is never printed.
			s.t.Errorf("with %s the env check exited %d, want %d", tt.name, got, tt.want)
		}
	}
}

func testMounts(s *suite) {
	dir := s.t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, MountMarker), []byte(MountMarkerContent), 0o644); err != nil {
		s.t.Fatal(err)
	}
	tests := []struct {
		name   string
		mounts []runtime.Mount
		want   int
	}{
		{"a read-write mount", []runtime.Mount{{HostPath: dir, ContainerPath: MountPath}}, 0},
		{"a read-only mount", []runtime.Mount{{HostPath: dir, ContainerPath: MountPath, ReadOnly: true}}, MountCheckReadOnly},
		{"no mount", nil, MountCheckMissing},
	}
	missing := filepath.Join(dir, "absent")
	for _, tt := range tests {
		spec := s.spec("mount", s.fx.MountCheck)
		spec.Mounts = tt.mounts
		id := s.run(spec)
		if got := s.wait(id); got != tt.want {
			s.t.Errorf("with %s the mount check exited %d, want %d", tt.name, got, tt.want)
		}
	}
	// Podman does not create a missing host folder: Create fails.
	spec := s.spec("mount", s.fx.MountCheck)
	spec.Mounts = []runtime.Mount{{HostPath: missing, ContainerPath: MountPath}}
	if _, err := s.rt.Create(s.ctx(), spec); err == nil {
		s.t.Error("Create with a mount of a missing host folder succeeded")
	}
}

func testWaitContext(s *suite) {
	id := s.run(s.spec("waitctx", s.fx.Running))
	ctx, cancel := context.WithTimeout(s.t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := s.rt.Wait(ctx, id)
	if !errors.Is(err, context.DeadlineExceeded) {
		s.t.Errorf("Wait past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if c := s.inspect(id); c.State != runtime.StateRunning {
		s.t.Errorf("after the abandoned Wait the state is %s, want running", c.State)
	}
}

func testNameInUse(s *suite) {
	spec := s.spec("dup", s.fx.Running)
	s.create(spec)
	_, err := s.rt.Create(s.ctx(), spec)
	if !errors.Is(err, runtime.ErrNameInUse) {
		s.t.Fatalf("second Create %s: %v, want ErrNameInUse", spec.Name, err)
	}
}

func testCreateMissingImage(s *suite) {
	spec := s.spec("noimage", "localhost/fleet-conformance/absent:"+s.name("tag"))
	_, err := s.rt.Create(s.ctx(), spec)
	if !errors.Is(err, runtime.ErrImageNotFound) {
		s.t.Fatalf("Create from an absent image: %v, want ErrImageNotFound", err)
	}
}

func testWaitExitCode(s *suite) {
	id := s.run(s.spec("exit3", s.fx.Exit3))
	if got := s.wait(id); got != 3 {
		s.t.Errorf("Wait = %d, want 3", got)
	}
	c := s.waitState(id, runtime.StateExited)
	if c.ExitCode != 3 {
		s.t.Errorf("Inspect ExitCode = %d, want 3", c.ExitCode)
	}
	// Waiting on an exited container returns at once with the same code.
	if got := s.wait(id); got != 3 {
		s.t.Errorf("second Wait = %d, want 3", got)
	}
}

// quickExits is how many containers testQuickExitRecorded runs: Podman
// dates about half of such exits a few milliseconds before the start it
// records, so a reader without ExitSkew fails within a few of them.
const quickExits = 12

func testQuickExitRecorded(s *suite) {
	for i := range quickExits {
		id := s.run(s.spec("quick", s.fx.Exit3))
		s.wait(id)
		c := s.waitState(id, runtime.StateExited)
		if c.ExitUnrecorded() {
			s.t.Fatalf("run %d inspected: exited at %s, started at %s: read as an exit the engine never saw (a reboot's)",
				i+1, c.FinishedAt.Format(time.RFC3339Nano), c.StartedAt.Format(time.RFC3339Nano))
		}
		list, err := s.rt.List(s.ctx())
		if err != nil {
			s.t.Fatal(err)
		}
		for _, l := range list {
			if l.ID == id && l.ExitUnrecorded() {
				s.t.Fatalf("run %d listed: exited at %s, started at %s: read as an exit the engine never saw (a reboot's)",
					i+1, l.FinishedAt.Format(time.RFC3339Nano), l.StartedAt.Format(time.RFC3339Nano))
			}
		}
		if err := s.rt.Remove(s.ctx(), id, true); err != nil {
			s.t.Fatal(err)
		}
	}
}

func testStopIgnoresTerm(s *suite) {
	id := s.run(s.spec("ignoreterm", s.fx.IgnoresTerm))
	s.waitState(id, runtime.StateRunning)
	// Durations are not asserted: a loaded machine may take longer. The
	// call must return, and the container must then be exited (killed).
	if err := s.rt.Stop(s.ctx(), id, 2*time.Second); err != nil {
		s.t.Fatalf("Stop: %v", err)
	}
	if c := s.inspect(id); c.State != runtime.StateExited {
		s.t.Errorf("after Stop the state is %s, want exited", c.State)
	}
}

func testStopHonoursTerm(s *suite) {
	id := s.run(s.spec("term", s.fx.Running))
	if err := s.rt.Stop(s.ctx(), id, 30*time.Second); err != nil {
		s.t.Fatalf("Stop: %v", err)
	}
	if c := s.inspect(id); c.State != runtime.StateExited {
		s.t.Errorf("after Stop the state is %s, want exited", c.State)
	}
}

func testStopNotRunning(s *suite) {
	created := s.create(s.spec("created", s.fx.Running))
	exited := s.run(s.spec("exited", s.fx.Exit3))
	s.wait(exited)
	for _, id := range []string{created, exited} {
		if err := s.rt.Stop(s.ctx(), id, time.Second); err != nil {
			s.t.Errorf("Stop of a %s container: %v", s.inspect(id).State, err)
		}
	}
}

func testRemoveForce(s *suite) {
	spec := s.spec("rmforce", s.fx.Running)
	id := s.run(spec)
	if err := s.rt.Remove(s.ctx(), id, true); err != nil {
		s.t.Fatalf("Remove force: %v", err)
	}
	if _, err := s.rt.Inspect(s.ctx(), id); !errors.Is(err, runtime.ErrNotFound) {
		s.t.Errorf("Inspect after Remove: %v, want ErrNotFound", err)
	}
	// The name is free again.
	s.create(spec)
}

func testRemoveRunningNoForce(s *suite) {
	id := s.run(s.spec("rmnoforce", s.fx.Running))
	if err := s.rt.Remove(s.ctx(), id, false); err == nil {
		s.t.Fatal("Remove without force of a running container succeeded")
	}
	if c := s.inspect(id); c.State != runtime.StateRunning {
		s.t.Errorf("after the refused Remove the state is %s, want running", c.State)
	}
	if err := s.rt.Stop(s.ctx(), id, 30*time.Second); err != nil {
		s.t.Fatalf("Stop: %v", err)
	}
	if err := s.rt.Remove(s.ctx(), id, false); err != nil {
		s.t.Fatalf("Remove of the stopped container: %v", err)
	}
}

func testMissingContainer(s *suite) {
	missing := s.name("missing")
	tests := []struct {
		method string
		call   func(ctx context.Context) error
	}{
		{"Inspect", func(ctx context.Context) error { _, err := s.rt.Inspect(ctx, missing); return err }},
		{"Start", func(ctx context.Context) error { return s.rt.Start(ctx, missing) }},
		{"Stop", func(ctx context.Context) error { return s.rt.Stop(ctx, missing, time.Second) }},
		{"Wait", func(ctx context.Context) error { _, err := s.rt.Wait(ctx, missing); return err }},
		{"Remove", func(ctx context.Context) error { return s.rt.Remove(ctx, missing, true) }},
	}
	for _, tt := range tests {
		if err := tt.call(s.ctx()); !errors.Is(err, runtime.ErrNotFound) {
			s.t.Errorf("%s of a missing container: %v, want ErrNotFound", tt.method, err)
		}
	}
}

func testInspectByNameAndID(s *suite) {
	spec := s.spec("byname", s.fx.Running)
	id := s.create(spec)
	for _, ref := range []string{spec.Name, id} {
		if c := s.inspect(ref); c.ID != id || c.Name != spec.Name {
			s.t.Errorf("Inspect %s = %s/%s, want %s/%s", ref, c.ID, c.Name, id, spec.Name)
		}
	}
}

func testListForeign(s *suite) {
	if s.fx.CreateForeign == nil {
		s.t.Skip("the fixture cannot create foreign containers")
	}
	name := s.fx.CreateForeign(s.t)
	list, err := s.rt.List(s.ctx())
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	if !slices.ContainsFunc(list, func(c runtime.Container) bool { return c.Name == name }) {
		s.t.Errorf("List does not include the foreign container %s", name)
	}
}

func testImageExists(s *suite) {
	tests := []struct {
		ref  string
		want bool
	}{
		{s.fx.Running, true},
		{"localhost/fleet-conformance/absent:" + s.name("tag"), false},
	}
	for _, tt := range tests {
		got, err := s.rt.ImageExists(s.ctx(), tt.ref)
		if err != nil {
			s.t.Fatalf("ImageExists %s: %v", tt.ref, err)
		}
		if got != tt.want {
			s.t.Errorf("ImageExists %s = %v, want %v", tt.ref, got, tt.want)
		}
	}
}

func (s *suite) registry() Registry {
	s.t.Helper()
	if s.fx.Registry == nil {
		s.t.Skip("the fixture has no registry")
	}
	reg := s.fx.Registry(s.t)
	s.secrets = append(s.secrets, reg.Auth.Password)
	return reg
}

func testPullWithCredentials(s *suite) {
	reg := s.registry()
	if ok, err := s.rt.ImageExists(s.ctx(), reg.Private); err != nil || ok {
		s.t.Fatalf("before the pull ImageExists = %v, %v; want false", ok, err)
	}
	auth := reg.Auth
	if err := s.rt.Pull(s.ctx(), reg.Private, &auth); err != nil {
		s.t.Fatalf("Pull with the right credentials: %v", err)
	}
	if ok, err := s.rt.ImageExists(s.ctx(), reg.Private); err != nil || !ok {
		s.t.Fatalf("after the pull ImageExists = %v, %v; want true", ok, err)
	}
	// The pulled image runs, and the container reports the reference it was
	// created from (a digest reference stays one).
	id := s.run(s.spec("pulled", reg.Private))
	if c := s.waitState(id, runtime.StateRunning); c.Image != reg.Private {
		s.t.Errorf("Inspect Image = %q, want %q", c.Image, reg.Private)
	}
	list, err := s.rt.List(s.ctx())
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	if i := slices.IndexFunc(list, func(c runtime.Container) bool { return c.ID == id }); i < 0 || list[i].Image != reg.Private {
		s.t.Errorf("List does not report %s with image %s", short(id), reg.Private)
	}
}

func testPullRefused(s *suite) {
	reg := s.registry()
	wrong := runtime.RegistryAuth{Username: reg.Auth.Username, Password: "wrong-" + reg.Auth.Password}
	s.secrets = append(s.secrets, wrong.Password)
	tests := []struct {
		name string
		auth *runtime.RegistryAuth
	}{
		{"no credentials", nil},
		{"a wrong password", &wrong},
		{"an unknown user", &runtime.RegistryAuth{Username: "nobody-" + s.name("u"), Password: reg.Auth.Password}},
	}
	for _, tt := range tests {
		err := s.rt.Pull(s.ctx(), reg.Private, tt.auth)
		if !errors.Is(err, runtime.ErrAuth) {
			s.t.Errorf("Pull with %s: %v, want ErrAuth", tt.name, err)
		}
		if errors.Is(err, runtime.ErrImageNotFound) {
			s.t.Errorf("Pull with %s is also ErrImageNotFound: the two must be told apart", tt.name)
		}
	}
}

func testImageDigestOfPull(s *suite) {
	// A local build's digest is the engine's business (Podman records
	// one of its own, no registry holds it): not checked.
	absent := "localhost/fleet-conformance/absent:" + s.name("tag")
	if d, err := s.rt.ImageDigest(s.ctx(), absent); !errors.Is(err, runtime.ErrImageNotFound) {
		s.t.Errorf("ImageDigest of an absent image = %q, %v; want ErrImageNotFound", d, err)
	}
	reg := s.registry()
	auth := reg.Auth
	if err := s.rt.Pull(s.ctx(), reg.Private, &auth); err != nil {
		s.t.Fatalf("Pull: %v", err)
	}
	_, want, _ := strings.Cut(reg.Private, "@")
	if d, err := s.rt.ImageDigest(s.ctx(), reg.Private); err != nil || d != want {
		s.t.Errorf("ImageDigest of the pulled %s = %q, %v; want %q", reg.Private, d, err, want)
	}
}

func testPullMissing(s *suite) {
	reg := s.registry()
	auth := reg.Auth
	err := s.rt.Pull(s.ctx(), reg.Missing, &auth)
	if !errors.Is(err, runtime.ErrImageNotFound) {
		s.t.Fatalf("Pull of a missing image: %v, want ErrImageNotFound", err)
	}
	if errors.Is(err, runtime.ErrAuth) {
		s.t.Error("Pull of a missing image with valid credentials is also ErrAuth")
	}
}

// engineNoise is text of an engine's error wrapping that a PullError never
// carries: the message is one line a user reads.
var engineNoise = []string{"podman:", "sim:", "initializing source", "pinging container registry", "reading manifest", "\n"}

func testPullError(s *suite) {
	reg := s.registry()
	auth := reg.Auth
	tests := []struct {
		name  string
		ref   string
		auth  *runtime.RegistryAuth
		want  error
		cause string
		tried string
	}{
		{"a missing image with the pull secret", reg.Missing, &auth, runtime.ErrImageNotFound, runtime.PullCauseNotFound,
			"with the pull secret for " + runtime.ImageAuthority(reg.Missing)},
		{"a private image pulled anonymously", reg.Private, nil, runtime.ErrAuth, runtime.PullCauseAuth, runtime.PullAnonymously},
	}
	if s.fx.Unreachable != nil {
		ref := s.fx.Unreachable(s.t)
		tests = append(tests, struct {
			name  string
			ref   string
			auth  *runtime.RegistryAuth
			want  error
			cause string
			tried string
		}{"an image on a registry that refuses connections", ref, nil, runtime.ErrRegistryUnavailable, runtime.PullCauseRefused, runtime.PullAnonymously})
	}
	for _, tt := range tests {
		err := s.rt.Pull(s.ctx(), tt.ref, tt.auth)
		var pe *runtime.PullError
		if !errors.As(err, &pe) {
			s.t.Errorf("%s: Pull = %v, want a *runtime.PullError", tt.name, err)
			continue
		}
		if !errors.Is(err, tt.want) {
			s.t.Errorf("%s: %v is not %v", tt.name, err, tt.want)
		}
		authority := runtime.ImageAuthority(tt.ref)
		if pe.Ref != tt.ref || pe.Authority != authority || pe.Auth != tt.tried || !strings.HasPrefix(pe.Cause, tt.cause) {
			s.t.Errorf("%s: PullError{Ref: %q, Authority: %q, Auth: %q, Cause: %q}, want %q, %q, %q and a cause starting %q",
				tt.name, pe.Ref, pe.Authority, pe.Auth, pe.Cause, tt.ref, authority, tt.tried, tt.cause)
		}
		msg := err.Error()
		want := "image " + tt.ref + " could not be pulled from " + authority + " (" + tt.tried + "): " + tt.cause
		if !strings.HasPrefix(msg, want) || strings.Count(msg, tt.ref) != 1 {
			s.t.Errorf("%s: the error reads %q; want one line starting %q that names the image once", tt.name, msg, want)
		}
		for _, n := range engineNoise {
			if strings.Contains(msg, n) {
				s.t.Errorf("%s: the error %q carries the engine's wrapping %q", tt.name, msg, n)
			}
		}
	}
}

func testRestartPolicy(s *suite) {
	if s.fx.RestartPolicy == nil {
		s.t.Skip("the fixture cannot read restart policies")
	}
	tests := []struct{ policy, want string }{
		{runtime.RestartNo, runtime.RestartNo},
		{runtime.RestartAlways, runtime.RestartAlways},
		{runtime.RestartOnFailure, runtime.RestartOnFailure},
		{runtime.RestartUnlessStopped, runtime.RestartUnlessStopped},
		{"", runtime.RestartNo},
	}
	for _, tt := range tests {
		spec := s.spec("restart", s.fx.Running)
		spec.RestartPolicy = tt.policy
		id := s.create(spec)
		if got := s.fx.RestartPolicy(s.t, id); got != tt.want && !(tt.want == runtime.RestartNo && got == "") {
			s.t.Errorf("restart policy %q is stored as %q, want %q", tt.policy, got, tt.want)
		}
	}
}

func testPortConflict(s *suite) {
	port := s.fx.HostPort(s.t)
	first := s.spec("port1", s.fx.Running)
	first.Ports = []runtime.PortBinding{{HostPort: port, ContainerPort: 80, Protocol: "tcp"}}
	second := s.spec("port2", s.fx.Running)
	second.Ports = []runtime.PortBinding{{HostPort: port, ContainerPort: 81, Protocol: "tcp"}}
	a := s.run(first)
	// Creating is allowed: the port is only taken while a holder runs.
	b := s.create(second)
	if err := s.rt.Start(s.ctx(), b); err == nil {
		s.t.Fatal("Start of a container whose host port is held succeeded")
	}
	if c := s.inspect(b); c.State == runtime.StateRunning {
		s.t.Errorf("after the failed Start the state is %s", c.State)
	}
	if err := s.rt.Stop(s.ctx(), a, 30*time.Second); err != nil {
		s.t.Fatalf("Stop the holder: %v", err)
	}
	s.start(b)
	if c := s.inspect(b); c.State != runtime.StateRunning {
		s.t.Errorf("once the port is free the state is %s, want running", c.State)
	}
}

func testRestartExited(s *suite) {
	id := s.run(s.spec("again", s.fx.Running))
	if err := s.rt.Stop(s.ctx(), id, 30*time.Second); err != nil {
		s.t.Fatalf("Stop: %v", err)
	}
	s.start(id)
	if c := s.inspect(id); c.State != runtime.StateRunning {
		s.t.Errorf("after a second Start the state is %s, want running", c.State)
	}
}

// testErrorsHoldNoSecret provokes failures with secrets in the inputs; the
// recorder's check at the end of the case scans every error returned.
func testErrorsHoldNoSecret(s *suite) {
	secretEnv := "env-secret-" + s.name("v")
	s.secrets = append(s.secrets, secretEnv)
	spec := s.spec("secret", s.fx.Running)
	spec.Env = map[string]string{"FLEET_SECRET": secretEnv}
	s.create(spec)
	if _, err := s.rt.Create(s.ctx(), spec); err == nil {
		s.t.Error("a second Create with the same name succeeded")
	}
	absent := spec
	absent.Name = s.name("secret")
	absent.Image = "localhost/fleet-conformance/absent:" + s.name("tag")
	if _, err := s.rt.Create(s.ctx(), absent); err == nil {
		s.t.Error("Create from an absent image succeeded")
	}
	if len(s.rt.errors()) == 0 {
		s.t.Fatal("no error was recorded: the scan would pass vacuously")
	}
	// The pulls run in a subtest, which a missing registry skips alone.
	s.t.Run("pulls with wrong passwords", func(t *testing.T) {
		sub := &suite{t: t, fx: s.fx, rt: s.rt, secrets: slices.Clone(s.secrets)}
		t.Cleanup(sub.checkErrorsHoldNoSecret)
		reg := sub.registry()
		for _, ref := range []string{reg.Private, reg.Missing} {
			bad := runtime.RegistryAuth{Username: reg.Auth.Username, Password: "wrong-" + secretEnv}
			sub.secrets = append(sub.secrets, bad.Password)
			if err := sub.rt.Pull(sub.ctx(), ref, &bad); err == nil {
				t.Errorf("Pull of %s with a wrong password succeeded", ref)
			}
		}
		auth := reg.Auth
		if err := sub.rt.Pull(sub.ctx(), reg.Missing, &auth); err == nil {
			t.Errorf("Pull of %s succeeded", reg.Missing)
		}
	})
}

// recorder passes calls through to a Runtime and keeps every error returned.
type recorder struct {
	rt runtime.Runtime

	mu   sync.Mutex // guards errs
	errs []recordedError
}

type recordedError struct {
	method string
	err    error
}

func (r *recorder) record(method string, err error) error {
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, recordedError{method, err})
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) errors() []recordedError {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

var _ runtime.Runtime = (*recorder)(nil)

func (r *recorder) List(ctx context.Context) ([]runtime.Container, error) {
	l, err := r.rt.List(ctx)
	return l, r.record("List", err)
}

func (r *recorder) Inspect(ctx context.Context, idOrName string) (runtime.Container, error) {
	c, err := r.rt.Inspect(ctx, idOrName)
	return c, r.record("Inspect", err)
}

func (r *recorder) ImageExists(ctx context.Context, ref string) (bool, error) {
	ok, err := r.rt.ImageExists(ctx, ref)
	return ok, r.record("ImageExists", err)
}

func (r *recorder) ImageDigest(ctx context.Context, ref string) (string, error) {
	d, err := r.rt.ImageDigest(ctx, ref)
	return d, r.record("ImageDigest", err)
}

func (r *recorder) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	return r.record("Pull", r.rt.Pull(ctx, ref, auth))
}

func (r *recorder) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	id, err := r.rt.Create(ctx, spec)
	return id, r.record("Create", err)
}

func (r *recorder) Start(ctx context.Context, id string) error {
	return r.record("Start", r.rt.Start(ctx, id))
}

func (r *recorder) Wait(ctx context.Context, id string) (int, error) {
	code, err := r.rt.Wait(ctx, id)
	return code, r.record("Wait", err)
}

func (r *recorder) Stop(ctx context.Context, id string, timeout time.Duration) error {
	return r.record("Stop", r.rt.Stop(ctx, id, timeout))
}

func (r *recorder) Remove(ctx context.Context, id string, force bool) error {
	return r.record("Remove", r.rt.Remove(ctx, id, force))
}

func (r *recorder) RunHealthCheck(ctx context.Context, id string) error {
	return r.record("RunHealthCheck", r.rt.RunHealthCheck(ctx, id))
}

func (r *recorder) Watch(ctx context.Context, labels map[string]string) (<-chan runtime.ContainerEvent, error) {
	ch, err := r.rt.Watch(ctx, labels)
	return ch, r.record("Watch", err)
}

func (r *recorder) Logs(ctx context.Context, id string, tail int) ([]string, error) {
	lines, err := r.rt.Logs(ctx, id, tail)
	return lines, r.record("Logs", err)
}

// healthSpec is a Running container with a health check of command. The
// interval is an hour: no check the engine schedules itself runs during a
// case, so every check is one the case runs.
func (s *suite) healthSpec(prefix string, command []string, retries int, startPeriod time.Duration) runtime.ContainerSpec {
	spec := s.spec(prefix, s.fx.Running)
	spec.HealthCheck = &runtime.HealthCheck{Command: command, Interval: time.Hour, Timeout: 30 * time.Second,
		StartPeriod: startPeriod, Retries: retries}
	return spec
}

func (s *suite) health(id string) runtime.Health {
	s.t.Helper()
	c := s.inspect(id)
	if c.Health == nil {
		s.t.Fatalf("Inspect %s reports no health for a container with a health check", short(id))
	}
	return *c.Health
}

func (s *suite) runHealthCheck(id string) runtime.Health {
	s.t.Helper()
	if err := s.rt.RunHealthCheck(s.ctx(), id); err != nil {
		s.t.Fatalf("RunHealthCheck %s: %v", short(id), err)
	}
	return s.health(id)
}

func testHealthPasses(s *suite) {
	id := s.run(s.healthSpec("health-pass", s.fx.HealthPasses, 2, 0))
	s.waitState(id, runtime.StateRunning)
	if h := s.health(id); h.Status != runtime.HealthStarting || h.Checks != 0 {
		s.t.Errorf("before any check the health is %+v, want status %q and no check", h, runtime.HealthStarting)
	}
	h := s.runHealthCheck(id)
	if h.Status != runtime.HealthHealthy || h.FailingStreak != 0 || h.LastExitCode != 0 || h.Checks != 1 {
		s.t.Errorf("after a passing check the health is %+v, want healthy, one check, exit code 0", h)
	}
}

func testHealthFails(s *suite) {
	id := s.run(s.healthSpec("health-fail", s.fx.HealthFails, 2, 0))
	s.waitState(id, runtime.StateRunning)
	h := s.runHealthCheck(id)
	if h.Status != runtime.HealthStarting || h.FailingStreak != 1 || h.LastExitCode == 0 {
		s.t.Errorf("after one failed check of 2 retries the health is %+v, want starting, a streak of 1, a non-zero exit code", h)
	}
	h = s.runHealthCheck(id)
	if h.Status != runtime.HealthUnhealthy || h.FailingStreak != 2 || h.LastExitCode == 0 {
		s.t.Errorf("after two failed checks of 2 retries the health is %+v, want unhealthy, a streak of 2", h)
	}
}

func testHealthStartPeriod(s *suite) {
	id := s.run(s.healthSpec("health-start", s.fx.HealthFails, 1, time.Hour))
	s.waitState(id, runtime.StateRunning)
	h := s.runHealthCheck(id)
	if h.Status != runtime.HealthStarting || h.FailingStreak != 0 || h.LastExitCode == 0 || h.Checks != 1 {
		s.t.Errorf("after a failed check within the start period the health is %+v, want starting, no streak, the failure logged", h)
	}
}

func testNoHealthCheck(s *suite) {
	id := s.run(s.spec("health-none", s.fx.Running))
	s.waitState(id, runtime.StateRunning)
	if c := s.inspect(id); c.Health != nil {
		s.t.Errorf("a container without a health check reports health %+v", *c.Health)
	}
	if err := s.rt.RunHealthCheck(s.ctx(), id); err == nil {
		s.t.Error("RunHealthCheck of a container without a health check succeeded")
	}
	if err := s.rt.RunHealthCheck(s.ctx(), s.name("missing")); !errors.Is(err, runtime.ErrNotFound) {
		s.t.Errorf("RunHealthCheck of a missing container: %v, want ErrNotFound", err)
	}
}
