package podman

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/containers/podman/v5/libpod/define"
	"github.com/containers/podman/v5/pkg/domain/entities/types"
	dockerevents "github.com/docker/docker/api/types/events"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// testdata/inspect-oomkilled.json is what Podman 4.3.1 answered to an
// inspect of a container killed under `--memory 8m`, trimmed to the
// fields the runtime reads. This host's memory controller (cgroup v1,
// cgroupfs) did not report the kill to conmon, so State.OOMKilled was set
// to true by hand, as Podman records it where the kill is reported.
func loadInspect(t *testing.T) *define.InspectContainerData {
	t.Helper()
	raw, err := os.ReadFile("testdata/inspect-oomkilled.json")
	if err != nil {
		t.Fatal(err)
	}
	var data define.InspectContainerData
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	return &data
}

func TestInspectReportsOOMKillsRestartsAndTheImageDigest(t *testing.T) {
	tests := []struct {
		name string
		edit func(*define.InspectContainerData)
		want func(runtime.Container) bool
	}{
		{"an OOM kill is reported with its exit code", func(*define.InspectContainerData) {},
			func(c runtime.Container) bool {
				return c.OOMKilled && c.ExitCode == 137 && c.State == runtime.StateExited
			}},
		{"a kill that is not the OOM killer's is not an OOM kill", func(d *define.InspectContainerData) { d.State.OOMKilled = false },
			func(c runtime.Container) bool { return !c.OOMKilled && c.ExitCode == 137 }},
		{"the restart count is the engine's", func(d *define.InspectContainerData) { d.RestartCount = 7 },
			func(c runtime.Container) bool { return c.RestartCount == 7 }},
		{"the image digest is the manifest digest", func(*define.InspectContainerData) {},
			func(c runtime.Container) bool {
				return c.ImageDigest == "sha256:bb8552a2c96e76717c56ff9e12cadfa22956901451906fd7ae226deea7654d81"
			}},
		{"without a digest the image ID stands in", func(d *define.InspectContainerData) { d.ImageDigest = "" },
			func(c runtime.Container) bool {
				return c.ImageDigest == "63e0ddbcb409a0211e9d4f8ce4cd6994206371bc0e046cf3f6d854f00f552b95"
			}},
		{"without a state nothing is OOM-killed", func(d *define.InspectContainerData) { d.State = nil },
			func(c runtime.Container) bool { return !c.OOMKilled && c.State == "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := loadInspect(t)
			tt.edit(data)
			if c := inspected(data); !tt.want(c) {
				t.Errorf("inspected = %+v", c)
			}
		})
	}
}

func TestPodmanEventsAreMapped(t *testing.T) {
	event := func(action, exitCode string, labels map[string]string) types.Event {
		var e types.Event
		e.Type, e.Action = "container", dockerevents.Action(action)
		e.Actor.ID = "2a21005d4dc9"
		e.Actor.Attributes = map[string]string{"name": "api", "containerExitCode": exitCode, "image": "localhost/fleet-base:latest"}
		for k, v := range labels {
			e.Actor.Attributes[k] = v
		}
		e.TimeNano = 1796438911544404881
		return e
	}
	owned := map[string]string{"fleet.nationtech.io/owner": "fleet-agent", "fleet.nationtech.io/device": "podman-1"}
	health := event("health_status", "0", owned)
	health.HealthStatus = "unhealthy"
	tests := []struct {
		name string
		in   types.Event
		want runtime.ContainerEvent
		ok   bool
	}{
		{"a death carries its exit code", event("died", "2", owned),
			runtime.ContainerEvent{ID: "2a21005d4dc9", Name: "api", Kind: runtime.EventDied, ExitCode: 2}, true},
		{"a start is a start", event("start", "0", owned), runtime.ContainerEvent{ID: "2a21005d4dc9", Name: "api", Kind: runtime.EventStart}, true},
		{"a health check carries the status Podman put in it", health,
			runtime.ContainerEvent{ID: "2a21005d4dc9", Name: "api", Kind: runtime.EventHealth, Health: "unhealthy"}, true},
		{"a removal is a removal", event("remove", "0", owned), runtime.ContainerEvent{ID: "2a21005d4dc9", Name: "api", Kind: runtime.EventRemoved}, true},
		{"a death without a readable code is a death", event("died", "", owned),
			runtime.ContainerEvent{ID: "2a21005d4dc9", Name: "api", Kind: runtime.EventDied}, true},
		{"another status is dropped", event("exec_died", "1", owned), runtime.ContainerEvent{}, false},
		{"a container with one of the labels only is dropped", event("died", "2", map[string]string{"fleet.nationtech.io/owner": "fleet-agent"}),
			runtime.ContainerEvent{}, false},
		{"a container with another device's label is dropped", event("died", "2", map[string]string{"fleet.nationtech.io/owner": "fleet-agent", "fleet.nationtech.io/device": "podman-2"}),
			runtime.ContainerEvent{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := containerEvent(tt.in, owned)
			if ok != tt.ok {
				t.Fatalf("delivered = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if got.Time.UnixNano() != tt.in.TimeNano {
				t.Errorf("time %s, want the event's", got.Time)
			}
			got.Time = tt.want.Time
			if got != tt.want {
				t.Errorf("mapped to %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLogFramesAreSplitIntoBoundedLines(t *testing.T) {
	long := make([]byte, runtime.MaxLogLine+10)
	for i := range long {
		long[i] = 'x'
	}
	tests := []struct {
		name   string
		frames []string
		want   []string
	}{
		{"one line per frame", []string{"one\n", "two\n"}, []string{"one", "two"}},
		{"a frame without a line end continues on the next", []string{"par", "tial\n", "next\n"}, []string{"partial", "next"}},
		{"a frame of several lines is split", []string{"a\nb\n"}, []string{"a", "b"}},
		{"a last line without an end is kept", []string{"a\nlast"}, []string{"a", "last"}},
		{"an empty line is kept", []string{"\n", "x\n"}, []string{"", "x"}},
		{"a long line is cut", []string{string(long), string(long) + "\n", "after\n"}, []string{string(long[:runtime.MaxLogLine]), "after"}},
		{"invalid UTF-8 is replaced", []string{"bad \xff\n"}, []string{"bad \uFFFD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b logLines
			for _, f := range tt.frames {
				b.add(f)
			}
			got := b.done()
			if len(got) != len(tt.want) {
				t.Fatalf("got %d lines %.80q, want %d", len(got), got, len(tt.want))
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("line %d = %.80q, want %.80q", i, got[i], tt.want[i])
				}
			}
		})
	}
}
