package agent_test

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/score"
)

// deviceClock is a device's clock in its local time zone, set by the test;
// reads counts how often the agent looked at it.
type deviceClock struct {
	loc   *time.Location
	unix  atomic.Int64
	reads atomic.Int64
}

func newDeviceClock(at time.Time) *deviceClock {
	c := &deviceClock{loc: at.Location()}
	c.set(at)
	return c
}

func (c *deviceClock) set(t time.Time) { c.unix.Store(t.Unix()) }

func (c *deviceClock) now() time.Time {
	c.reads.Add(1)
	return time.Unix(c.unix.Load(), 0).In(c.loc)
}

// lookedAgain waits until the agent read the clock n more times: it
// evaluated the windows again, whatever it decided.
func (c *deviceClock) lookedAgain(t *testing.T, n int64) {
	t.Helper()
	from := c.reads.Load()
	testenv.Eventually(t, "the agent to look at its clock again", 20*time.Second, func() bool { return c.reads.Load() >= from+n })
}

// TestADeploymentWithAMaintenanceWindowSwitchesOnlyInsideIt: a device
// handed a revision outside the revision's window (device local time)
// keeps running the revision it runs and reports the new one Pending with
// when the window opens; inside the window it switches; a switch that
// began inside the window is finished after it closes, even by a
// restarted agent (ADR 0029).
func TestADeploymentWithAMaintenanceWindowSwitchesOnlyInsideIt(t *testing.T) {
	loc := time.FixedZone("device", -5*3600)
	clock := newDeviceClock(time.Date(2026, 12, 5, 1, 0, 0, 0, loc))
	withClock := func(o *agent.Options) { o.Now, o.TaskPoll = clock.now, 20*time.Millisecond }
	e := startAgent(t, withClock)
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)

	v2 := baseScore()
	v2.Data.Services[1].Image = "reg.example/api:v2"
	gen2 := entry(t, 2, v2)
	gen2.Window = &events.MaintenanceWindow{Start: "02:00", Duration: "1h"}
	e.put(gen2)
	got := e.waitStatus(2, events.WorkloadPending)
	if !strings.Contains(got.Error, "waiting for the maintenance window (02:00 for 1h, device local time)") || !strings.Contains(got.Error, "2026-12-05 02:00") {
		t.Errorf("pending report %q does not say which window and when it opens", got.Error)
	}
	if want := time.Date(2026, 12, 5, 2, 0, 0, 0, loc); got.WindowOpens == nil || !got.WindowOpens.Equal(want) || !got.Since.Equal(time.Date(2026, 12, 5, 1, 0, 0, 0, loc)) {
		t.Errorf("windowOpens %v since %s, want %s since 01:00", got.WindowOpens, got.Since, want)
	}
	clock.lookedAgain(t, 20)
	if c := e.containers()["worker"]; c.Labels[agent.LabelGeneration] != "1" || c.Image != "reg.example/worker:v1" {
		t.Errorf("outside the window the device switched: worker %s generation %s", c.Image, c.Labels[agent.LabelGeneration])
	}
	for _, s := range e.statuses() {
		if s.Generation == 2 && s.Phase != events.WorkloadPending {
			t.Fatalf("outside the window generation 2 went %s", s.Phase)
		}
	}

	t.Run("inside the window it switches", func(t *testing.T) {
		clock.set(time.Date(2026, 12, 5, 2, 30, 0, 0, loc))
		e.waitStatus(2, events.WorkloadConverged)
		var phases []events.WorkloadPhase
		for _, s := range e.statuses() {
			if s.Generation == 2 {
				phases = append(phases, s.Phase)
			}
		}
		if diff := cmp.Diff([]events.WorkloadPhase{events.WorkloadPending, events.WorkloadApplying, events.WorkloadConverged}, phases); diff != "" {
			t.Errorf("generation 2's reports (-want +got):\n%s", diff)
		}
		if c := e.containers()["worker"]; c.Labels[agent.LabelGeneration] != "2" || c.Image != "reg.example/api:v2" {
			t.Errorf("worker %s generation %s after the switch", c.Image, c.Labels[agent.LabelGeneration])
		}
	})
	// After the window closed, the agent restarts.
	clock.set(time.Date(2026, 12, 5, 4, 0, 0, 0, loc))
	e.stop()
	before := len(e.statuses())
	e = restartAgent(t, e, withClock)
	t.Run("after the window closed a restarted agent keeps the revision it switched to", func(t *testing.T) {
		testenv.Eventually(t, "the restarted agent's report of generation 2", 20*time.Second, func() bool {
			ss := e.statuses()
			return len(ss) > before && ss[len(ss)-1].Phase == events.WorkloadConverged
		})
		for _, s := range e.statuses()[before:] {
			if s.WindowOpens != nil || s.Phase == events.WorkloadPending {
				t.Errorf("the restarted agent reported %s %q: it holds the revision already", s.Phase, s.Error)
			}
		}
	})
	t.Run("a revision without a window switches at once, whatever the time", func(t *testing.T) {
		e.put(entry(t, 3, baseScore()))
		e.waitStatus(3, events.WorkloadConverged)
	})
}

// TestAFetchWindowHoldsTheFetchUntilItOpens: with prefetch, a revision
// offered with a fetch window is fetched only inside it (device local
// time); the images of a revision offered without one are fetched at once
// (ADR 0029).
func TestAFetchWindowHoldsTheFetchUntilItOpens(t *testing.T) {
	loc := time.FixedZone("device", 9*3600)
	clock := newDeviceClock(time.Date(2026, 12, 5, 12, 0, 0, 0, loc))
	e := startAgent(t, func(o *agent.Options) { o.Now, o.TaskPoll = clock.now, 20*time.Millisecond })
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api",
		Image: "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ImagePullSecret: "hub-pull"}}}}
	fetch := events.FetchEntry{Namespace: "lab", Name: "analysis", UID: "u1", Generation: 2, RevisionID: "r2", Score: scoreJSON(t, s),
		Window: &events.MaintenanceWindow{Start: "23:00", Duration: "3h"}}
	b, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{}, Fetch: []events.FetchEntry{fetch}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.kv.Put(e.ctx, "d1", b); err != nil {
		t.Fatal(err)
	}
	fetched := func() []events.WorkloadFetch {
		var out []events.WorkloadFetch
		for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.fetch", events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			f, err := events.Decode[events.WorkloadFetch](r.Event)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, f)
		}
		return out
	}
	clock.lookedAgain(t, 20)
	if got := fetched(); len(got) != 0 {
		t.Fatalf("fetched outside the fetch window: %+v", got)
	}
	clock.set(time.Date(2026, 12, 6, 0, 30, 0, 0, loc)) // across midnight: inside
	testenv.Eventually(t, "the fetch inside the window", 20*time.Second, func() bool {
		got := fetched()
		return len(got) > 0 && got[len(got)-1].Phase == events.FetchDone
	})
}
