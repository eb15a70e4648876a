package projections_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

var healthT0 = time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)

// healthEv is one event of Deployment lab/api at stream time healthT0+at
// seconds: a degraded or recovered report of dev for generation gen, a
// workload report, or the Deployment's deletion.
func healthEv(t *testing.T, typ events.Type, dev string, gen int64, at int, mut ...func(*events.WorkloadHealth)) projections.Payload {
	t.Helper()
	stored := healthT0.Add(time.Duration(at) * time.Second)
	var ev events.Event
	var err error
	switch typ {
	case events.TypeWorkloadDegraded, events.TypeWorkloadRecovered:
		d := events.WorkloadHealth{Namespace: "lab", Deployment: "api", UID: "u1", Generation: gen, RevisionID: "rev", Reason: events.HealthCrashLoop,
			Window: 300, Services: []events.ServiceHealth{{Name: "api", State: "exited", Restarts: 3, ExitCode: 2}}, Since: stored}
		if typ == events.TypeWorkloadRecovered {
			d.Reason = events.HealthStable
		}
		for _, m := range mut {
			m(&d)
		}
		ev, err = events.New(events.Keys{Device: dev}, events.NewWorkloadHealth(typ, d), events.WithCorrelation("u1", gen), events.WithTime(stored))
	case events.TypeDeploymentDeleted:
		ev, err = events.New(events.Keys{Namespace: "lab", Name: "api"}, events.DeploymentDeleted{UID: "u1", Generation: gen}, events.WithTime(stored))
	default:
		phase := events.WorkloadPhase(typ)
		ev, err = events.New(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: gen,
			RevisionID: "rev", Phase: phase, Since: stored}, events.WithTime(stored))
	}
	if err != nil {
		t.Fatal(err)
	}
	p := projections.NewPayload(ev)
	p.Stored = stored
	return p
}

// status is a workload report of phase (healthEv's default case).
func status(phase events.WorkloadPhase) events.Type { return events.Type(phase) }

func foldHealth(t *testing.T, evs []projections.Payload) (*projections.Health, []bool) {
	t.Helper()
	var h projections.Health
	var changed []bool
	for i := range evs {
		changed = append(changed, h.Apply(&evs[i]))
	}
	return &h, changed
}

func devicesOf(h *projections.Health) []string {
	var out []string
	for _, e := range h.Entries() {
		out = append(out, e.Device+"@"+string(rune('0'+e.Generation)))
	}
	return out
}

func TestHealthFoldsDegradedAndRecovered(t *testing.T) {
	tests := []struct {
		name string
		evs  func(t *testing.T) []projections.Payload
		want []string
	}{
		{"a degraded report sets the device's entry", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadDegraded, "d2", 1, 2)}
		}, []string{"d1@1", "d2@1"}},
		{"a recovered report of the same revision clears it", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadRecovered, "d1", 1, 2)}
		}, nil},
		{"a recovered report of another revision clears nothing", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 2, 1), healthEv(t, events.TypeWorkloadRecovered, "d1", 1, 2)}
		}, []string{"d1@2"}},
		{"a recovered report of another device clears nothing", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadRecovered, "d2", 1, 2)}
		}, []string{"d1@1"}},
		{"a workload report of a new revision clears it", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, status(events.WorkloadApplying), "d1", 2, 2)}
		}, nil},
		{"a workload report of the same revision keeps it", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, status(events.WorkloadFailed), "d1", 1, 2)}
		}, []string{"d1@1"}},
		{"a Removed report clears it", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, status(events.WorkloadRemoved), "d1", 1, 2)}
		}, nil},
		{"a degraded report of a new revision replaces the old one", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadDegraded, "d1", 2, 2)}
		}, []string{"d1@2"}},
		{"the Deployment's deletion clears every entry", func(t *testing.T) []projections.Payload {
			return []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadDegraded, "d2", 1, 2),
				healthEv(t, events.TypeDeploymentDeleted, "", 1, 3)}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := foldHealth(t, tc.evs(t))
			if diff := cmp.Diff(tc.want, devicesOf(h)); diff != "" {
				t.Errorf("degraded devices (-want +got):\n%s", diff)
			}
			if h.Len() != len(tc.want) {
				t.Errorf("Len %d, want %d", h.Len(), len(tc.want))
			}
		})
	}
}

func TestAReSentDegradedReportChangesNothing(t *testing.T) {
	first := healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1)
	again := healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 90) // a reconnect's copy, stored later
	worse := healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 120, func(d *events.WorkloadHealth) { d.Reason = events.HealthOOMKilled })
	h, changed := foldHealth(t, []projections.Payload{first, again, worse})
	if diff := cmp.Diff([]bool{true, false, true}, changed); diff != "" {
		t.Errorf("changed (-want +got):\n%s", diff)
	}
	e := h.Entries()[0]
	if !e.Since.Equal(healthT0.Add(time.Second)) {
		t.Errorf("since %s, want the first report's stored time: the device is degraded since then", e.Since)
	}
	if e.Reason != events.HealthOOMKilled {
		t.Errorf("reason %q, want the latest", e.Reason)
	}
}

func TestTheDegradedMessageNamesTheServiceAndIsBounded(t *testing.T) {
	p := healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1)
	h, _ := foldHealth(t, []projections.Payload{p})
	if got, want := h.Entries()[0].Message, "api: CrashLoop, exited with code 2, 3 restarts in 5m0s"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	hostile := healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1, func(d *events.WorkloadHealth) {
		d.Services = nil
		for range 100 {
			d.Services = append(d.Services, events.ServiceHealth{Name: strings.Repeat("\x1b[2J", 5000), Signal: "SIGKILL"})
		}
	})
	h, _ = foldHealth(t, []projections.Payload{hostile})
	e := h.Entries()[0]
	if len(e.Message) > projections.MaxDegradedMessage || strings.Contains(e.Message, "\x1b") {
		t.Errorf("message of %d bytes, escaped %v; bound %d", len(e.Message), !strings.Contains(e.Message, "\x1b"), projections.MaxDegradedMessage)
	}
}

// TestAHealthSnapshotResumesToTheSameFold: folding a history, or half of
// it, through JSON (as the runner's checkpoint keeps it), then the rest,
// gives the same fold: a rebuild equals the live fold.
func TestAHealthSnapshotResumesToTheSameFold(t *testing.T) {
	evs := []projections.Payload{
		healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadDegraded, "d2", 1, 2),
		healthEv(t, events.TypeWorkloadDegraded, "d3", 1, 3), healthEv(t, events.TypeWorkloadRecovered, "d2", 1, 4),
		healthEv(t, status(events.WorkloadConverged), "d3", 2, 5), healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 6),
		healthEv(t, events.TypeWorkloadDegraded, "d4", 2, 7),
	}
	live, _ := foldHealth(t, evs)
	for cut := range len(evs) + 1 {
		half, _ := foldHealth(t, evs[:cut])
		b, err := json.Marshal(half)
		if err != nil {
			t.Fatal(err)
		}
		var resumed projections.Health
		if err := json.Unmarshal(b, &resumed); err != nil {
			t.Fatal(err)
		}
		for i := cut; i < len(evs); i++ {
			resumed.Apply(&evs[i])
		}
		if diff := cmp.Diff(live.Entries(), resumed.Entries()); diff != "" {
			t.Errorf("resumed after %d events (-live +resumed):\n%s", cut, diff)
		}
		if !live.Since().Equal(resumed.Since()) {
			t.Errorf("resumed after %d events: since %s, live %s", cut, resumed.Since(), live.Since())
		}
	}
}

func TestPruneDropsTheDevicesThatNoLongerHoldTheRevision(t *testing.T) {
	h, _ := foldHealth(t, []projections.Payload{healthEv(t, events.TypeWorkloadDegraded, "d1", 1, 1), healthEv(t, events.TypeWorkloadDegraded, "d2", 1, 2)})
	if !h.Prune(healthT0.Add(time.Minute), func(e projections.DegradedEntry) bool { return e.Device == "d2" }) {
		t.Fatal("Prune reported no change")
	}
	if diff := cmp.Diff([]string{"d2@1"}, devicesOf(h)); diff != "" {
		t.Errorf("degraded devices (-want +got):\n%s", diff)
	}
	if h.Prune(healthT0.Add(time.Minute), func(projections.DegradedEntry) bool { return true }) {
		t.Error("Prune that keeps everything reported a change")
	}
}
