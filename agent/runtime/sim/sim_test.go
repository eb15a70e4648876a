package sim_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	goruntime "runtime"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/runtimetest"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
)

// Images of the conformance fixture, scripted by sim.DefaultBehaviour and
// the env check in behave.
const (
	imgRunning     = "localhost/conformance/running:1"
	imgIgnoresTerm = "localhost/conformance/ignore-term:1"
	imgExit3       = "localhost/conformance/exit-3:1"
	imgEnvCheck    = "localhost/conformance/envcheck:1"
	imgMountCheck  = "localhost/conformance/mountcheck:1"
	imgPrints      = "localhost/conformance/prints:1"
	imgCrashable   = "localhost/conformance/crashable:1"
	imgPrivate     = "registry.test:5000/conformance/private@sha256:0123"
	imgMissing     = "registry.test:5000/conformance/missing:1"
)

// behave adds the env check to the default behaviour.
func behave(spec runtime.ContainerSpec) sim.Behaviour {
	if spec.Image == imgEnvCheck {
		code := 1
		if spec.Env[runtimetest.EnvCheckVar] == runtimetest.EnvCheckValue {
			code = 0
		}
		return sim.Behaviour{Exits: true, ExitCode: code}
	}
	if spec.Image == imgMountCheck {
		return sim.Behaviour{Exits: true, ExitCode: mountCheck(spec.Mounts)}
	}
	if spec.Image == imgPrints {
		return sim.Behaviour{Output: runtimetest.PrintedLines}
	}
	return sim.DefaultBehaviour(spec)
}

// mountCheck does what the conformance mount-check image does, reading the
// host folder itself.
func mountCheck(mounts []runtime.Mount) int {
	for _, m := range mounts {
		if m.ContainerPath != runtimetest.MountPath {
			continue
		}
		data, err := os.ReadFile(filepath.Join(m.HostPath, runtimetest.MountMarker))
		if err != nil || string(data) != runtimetest.MountMarkerContent {
			return runtimetest.MountCheckMissing
		}
		if m.ReadOnly {
			return runtimetest.MountCheckReadOnly
		}
		return 0
	}
	return runtimetest.MountCheckMissing
}

func TestConformance(t *testing.T) {
	auth := runtime.RegistryAuth{Username: "device-pull", Password: "sim-password-41c7"}
	runtimetest.Run(t, func(t *testing.T) (runtime.Runtime, runtimetest.Fixture) {
		rt := sim.New(sim.Options{
			LocalImages: []string{imgRunning, imgIgnoresTerm, imgExit3, imgEnvCheck, imgMountCheck, imgPrints, imgCrashable},
			Registry:    map[string]sim.RegistryImage{imgPrivate: {Auth: &auth, Layers: []runtime.Layer{{Digest: "sha256:0a", Size: 3 << 20}}}},
			Unreachable: []string{"unreachable.example:5000"},
			Behave:      behave,
			Now:         time.Now,
			HostPathExists: func(path string) bool {
				_, err := os.Stat(path)
				return err == nil
			},
		})
		var port uint16 = 30000
		return rt, runtimetest.Fixture{
			Labels:      map[string]string{"io.nationtech.harmony-fleet.test": t.Name()},
			Running:     imgRunning,
			IgnoresTerm: imgIgnoresTerm,
			Exit3:       imgExit3,
			EnvCheck:    imgEnvCheck,
			MountCheck:  imgMountCheck,
			HostPort:    func(*testing.T) uint16 { port++; return port },
			Registry: func(*testing.T) runtimetest.Registry {
				return runtimetest.Registry{Private: imgPrivate, Auth: auth, Missing: imgMissing}
			},
			Unreachable: func(*testing.T) string { return "unreachable.example:5000/app:v1" },
			CreateForeign: func(t *testing.T) string {
				id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "foreign", Image: imgRunning})
				if err != nil {
					t.Fatal(err)
				}
				if err := rt.Start(t.Context(), id); err != nil {
					t.Fatal(err)
				}
				return "foreign"
			},
			Prints:    imgPrints,
			Crashable: imgCrashable,
			Crash: func(t *testing.T, id string) {
				if err := rt.Crash(id, runtimetest.CrashExitCode, false); err != nil {
					t.Fatal(err)
				}
			},
			RestartPolicy: func(t *testing.T, id string) string {
				p, err := rt.RestartPolicy(id)
				if err != nil {
					t.Fatal(err)
				}
				return p
			},
			HealthPasses: []string{"/bin/true"},
			HealthFails:  []string{"/bin/false"},
		}
	})
}

func TestDefaultBehaviourScriptsContainersByImageName(t *testing.T) {
	tests := []struct {
		name  string
		image string
		want  sim.Behaviour
	}{
		{"an exit-0 image exits with 0", "reg/app-exit-0:1", sim.Behaviour{Exits: true, ExitCode: 0}},
		{"an exit-42 image exits with 42", "reg/migrate-exit-42@sha256:ab", sim.Behaviour{Exits: true, ExitCode: 42}},
		{"an ignore-term image runs and ignores SIGTERM", "reg/ignore-term:1", sim.Behaviour{IgnoresTerm: true}},
		{"any other image runs until stopped", "reg/api:1", sim.Behaviour{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sim.DefaultBehaviour(runtime.ContainerSpec{Image: tt.image}); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DefaultBehaviour(%s) = %+v, want %+v", tt.image, got, tt.want)
			}
		})
	}
}

func TestExitEndsARunningContainerAndWakesItsWaiters(t *testing.T) {
	ctx := t.Context()
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning}})
	id, err := rt.Create(ctx, runtime.ContainerSpec{Name: "crash", Image: imgRunning})
	if err != nil {
		t.Fatal(err)
	}
	codes := make(chan int, 1)
	go func() {
		code, _ := rt.Wait(ctx, id)
		codes <- code
	}()
	if err := rt.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := rt.Exit(id, 139); err != nil {
		t.Fatal(err)
	}
	if got := <-codes; got != 139 {
		t.Errorf("Wait = %d, want 139", got)
	}
}

func TestWaitOnARemovedCreatedContainerIsErrNotFound(t *testing.T) {
	ctx := t.Context()
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning}})
	id, err := rt.Create(ctx, runtime.ContainerSpec{Name: "never-started", Image: imgRunning})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 1)
	go func() {
		_, err := rt.Wait(ctx, id)
		errs <- err
	}()
	if err := rt.Remove(ctx, id, false); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Wait = %v, want ErrNotFound", err)
	}
}

func TestIDsAreDeterministic(t *testing.T) {
	ids := func() []string {
		rt := sim.New(sim.Options{LocalImages: []string{imgRunning}})
		var out []string
		for i := range 3 {
			id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: fmt.Sprint("c", i), Image: imgRunning})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, id)
		}
		return out
	}
	a, b := ids(), ids()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("run 1 IDs %v, run 2 IDs %v", a, b)
		}
	}
}

func TestConcurrentUseIsSafe(t *testing.T) {
	ctx := t.Context()
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning, imgExit3}})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				img := imgRunning
				if i%2 == 0 {
					img = imgExit3
				}
				id, err := rt.Create(ctx, runtime.ContainerSpec{Name: fmt.Sprintf("w%d-%d", w, i), Image: img,
					Ports: []runtime.PortBinding{{HostPort: uint16(20000 + i), ContainerPort: 80}}})
				if err != nil {
					t.Error(err)
					return
				}
				_ = rt.Start(ctx, id) // port conflicts between workers are expected
				if _, err := rt.List(ctx); err != nil {
					t.Error(err)
				}
				if err := rt.Remove(ctx, id, true); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if l, _ := rt.List(ctx); len(l) != 0 {
		t.Errorf("%d containers left", len(l))
	}
}

// BenchmarkDeviceReconcile measures what one simulated device costs: a fresh
// Runtime, an init container run to completion and two services started.
func BenchmarkDeviceReconcile(b *testing.B) {
	ctx := context.Background()
	images := []string{"reg/migrate-exit-0:1", "reg/api:1", "reg/worker:1"}
	for b.Loop() {
		rt := sim.New(sim.Options{LocalImages: images})
		id, err := rt.Create(ctx, runtime.ContainerSpec{Name: "init", Image: images[0], RestartPolicy: runtime.RestartNo})
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.Start(ctx, id); err != nil {
			b.Fatal(err)
		}
		if code, err := rt.Wait(ctx, id); err != nil || code != 0 {
			b.Fatal(code, err)
		}
		for i, img := range images[1:] {
			id, err := rt.Create(ctx, runtime.ContainerSpec{Name: fmt.Sprint("svc", i), Image: img,
				Ports: []runtime.PortBinding{{HostPort: uint16(8080 + i), ContainerPort: 8080}}})
			if err != nil {
				b.Fatal(err)
			}
			if err := rt.Start(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
		if l, err := rt.List(ctx); err != nil || len(l) != 3 {
			b.Fatal(len(l), err)
		}
	}
}

// BenchmarkTenThousandDevices holds 10,000 simulated devices, each with a
// completed init container and two running services, and reports the heap
// each device keeps.
func BenchmarkTenThousandDevices(b *testing.B) {
	const devices = 10_000
	ctx := context.Background()
	images := []string{"reg/migrate-exit-0:1", "reg/api:1", "reg/worker:1"}
	for b.Loop() {
		var before, after goruntime.MemStats
		goruntime.GC()
		goruntime.ReadMemStats(&before)
		fleet := make([]*sim.Runtime, devices)
		for d := range fleet {
			rt := sim.New(sim.Options{LocalImages: images})
			for i, img := range images {
				id, err := rt.Create(ctx, runtime.ContainerSpec{Name: fmt.Sprint("c", i), Image: img,
					Labels: map[string]string{"io.nationtech.harmony-fleet.deployment": "analysis-api"}})
				if err != nil {
					b.Fatal(err)
				}
				if err := rt.Start(ctx, id); err != nil {
					b.Fatal(err)
				}
			}
			fleet[d] = rt
		}
		goruntime.GC()
		goruntime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/devices, "heap-B/device")
		goruntime.KeepAlive(fleet)
	}
}

func TestAnUnavailableRegistryFailsPullsButNotTheEngine(t *testing.T) {
	rt := sim.New(sim.Options{Registry: map[string]sim.RegistryImage{imgMissing: {}}})
	rt.SetRegistryUnavailable(true)
	err := rt.Pull(t.Context(), imgMissing, nil)
	if !errors.Is(err, runtime.ErrRegistryUnavailable) || runtime.IsUnavailable(err) {
		t.Fatalf("got %v, want runtime.ErrRegistryUnavailable and not an unavailable engine", err)
	}
	if _, err := rt.List(t.Context()); err != nil {
		t.Errorf("the engine stopped answering: %v", err)
	}
	rt.SetRegistryUnavailable(false)
	if err := rt.Pull(t.Context(), imgMissing, nil); err != nil {
		t.Errorf("pull after the registry came back: %v", err)
	}
}

func TestStartedAtIsReportedOnlyWithAClock(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		now  func() time.Time
		want time.Time
	}{
		{"without a clock StartedAt stays zero", nil, time.Time{}},
		{"with a clock StartedAt is the time of the start", func() time.Time { return at }, at},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := sim.New(sim.Options{LocalImages: []string{imgRunning}, Now: tt.now})
			id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "c", Image: imgRunning})
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Start(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			c, err := rt.Inspect(t.Context(), id)
			if err != nil || !c.StartedAt.Equal(tt.want) {
				t.Errorf("StartedAt = %v (%v), want %v", c.StartedAt, err, tt.want)
			}
		})
	}
}

func TestRebootLeavesContainersAsPodmansRefreshDoes(t *testing.T) {
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning, imgExit3}, Now: time.Now})
	ids := map[string]string{}
	for name, img := range map[string]string{"running": imgRunning, "exited": imgExit3, "created": imgRunning} {
		id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: name, Image: img})
		if err != nil {
			t.Fatal(err)
		}
		if name != "created" {
			if err := rt.Start(t.Context(), id); err != nil {
				t.Fatal(err)
			}
		}
		ids[name] = id
	}
	rt.Reboot()
	tests := []struct {
		name       string
		container  string
		state      runtime.State
		exitCode   int
		unrecorded bool
	}{
		{"a running container is exited with exit code 0 and no exit recorded", "running", runtime.StateExited, 0, true},
		{"an exited container keeps its exit code and its recorded exit", "exited", runtime.StateExited, 3, false},
		{"a created container stays created", "created", runtime.StateCreated, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := rt.Inspect(t.Context(), ids[tt.container])
			if err != nil {
				t.Fatal(err)
			}
			if c.State != tt.state || c.ExitCode != tt.exitCode || c.ExitUnrecorded() != tt.unrecorded {
				t.Errorf("%+v: want %s, exit code %d, unrecorded %v", c, tt.state, tt.exitCode, tt.unrecorded)
			}
		})
	}
}

func TestAnImagePulledByTagAnswersToItsRepositoryAtItsDigestAsPodmansDoes(t *testing.T) {
	ctx := context.Background()
	r := sim.New(sim.Options{Registry: map[string]sim.RegistryImage{"reg.example:5000/team/api:v1": {}}})
	if err := r.Pull(ctx, "reg.example:5000/team/api:v1", nil); err != nil {
		t.Fatal(err)
	}
	d, err := r.ImageDigest(ctx, "reg.example:5000/team/api:v1")
	if err != nil {
		t.Fatal(err)
	}
	pinned := "reg.example:5000/team/api@" + d
	got, err := r.ImageDigest(ctx, pinned)
	if err != nil || got != d {
		t.Fatalf("ImageDigest(%s) = %q, %v; want %q", pinned, got, err, d)
	}
	if _, err := r.Create(ctx, runtime.ContainerSpec{Name: "api", Image: pinned}); err != nil {
		t.Fatalf("create from the pinned reference: %v", err)
	}
}
