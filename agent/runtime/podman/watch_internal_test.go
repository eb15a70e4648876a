package podman

import (
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/domain/entities/types"
	dockerevents "github.com/docker/docker/api/types/events"
	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// podmanEvent is a container event as the bindings decode Podman's
// /events stream.
func podmanEvent(id, action string, at time.Time, health string) types.Event {
	return types.Event{HealthStatus: health, Message: dockerevents.Message{Type: "container", Action: dockerevents.Action(action),
		Actor: dockerevents.Actor{ID: id, Attributes: map[string]string{"name": "svc-" + id, "watch": "w", "containerExitCode": "2"}},
		Time:  at.Unix(), TimeNano: at.UnixNano()}}
}

// TestAWatchDeliversEachEventOnceWhenPodmanRotatesItsEventLog: Podman
// 4.3's file events backend rotates its log (at events_logfile_max_size,
// 1 MB by default; every few minutes on a busy test machine) by writing
// the newer half to a new file, and a streaming reader reopens it from
// the start: every event of that half newer than the watch's start comes
// a second time (later Podman marks the copy and skips it). A watch
// delivers each event once, in order: a death seen twice would be counted
// as two (a false crash loop), and the conformance case "a watch delivers
// each health check run" got the container's start again where it waited
// for a health check.
func TestAWatchDeliversEachEventOnceWhenPodmanRotatesItsEventLog(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	start := podmanEvent("a", "start", t0, "")
	check1 := podmanEvent("a", "health_status", t0.Add(time.Second), "starting")
	died := podmanEvent("a", "died", t0.Add(2*time.Second), "")
	check2 := podmanEvent("a", "health_status", t0.Add(3*time.Second), "unhealthy")
	other := podmanEvent("b", "start", t0.Add(time.Second), "") // another container, same time
	raw := make(chan types.Event, 16)
	for _, e := range []types.Event{
		start, check1, other, died,
		start, check1, other, died, // the rotation's copy of the log's newer half
		check2,
	} {
		raw <- e
	}
	close(raw)
	out := make(chan runtime.ContainerEvent, 16)
	forward(raw, map[string]string{"watch": "w"}, out)
	close(out)
	var got []runtime.ContainerEvent
	for e := range out {
		got = append(got, e)
	}
	want := []runtime.ContainerEvent{
		{ID: "a", Name: "svc-a", Kind: runtime.EventStart, Time: t0},
		{ID: "a", Name: "svc-a", Kind: runtime.EventHealth, Time: t0.Add(time.Second), Health: "starting"},
		{ID: "b", Name: "svc-b", Kind: runtime.EventStart, Time: t0.Add(time.Second)},
		{ID: "a", Name: "svc-a", Kind: runtime.EventDied, Time: t0.Add(2 * time.Second), ExitCode: 2},
		{ID: "a", Name: "svc-a", Kind: runtime.EventHealth, Time: t0.Add(3 * time.Second), Health: "unhealthy"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("delivered (-want +got):\n%s", diff)
	}
}
