package events_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// Heartbeats are soft state (ADR 0024): the last one per device, in
// memory, never a stored, fsynced write; inventory and container reports
// stay in FLEET_TELEMETRY.
func TestHeartbeatsAreKeptLastPerDeviceInMemoryNotInTheStoredTelemetry(t *testing.T) {
	const liveness = "FLEET_LIVENESS" // events.StreamLiveness
	ctx := testContext(t)
	srv, st := natstest.Provisioned(t)
	js := st.JetStream()
	var evs []events.Event
	for i := range 5 {
		evs = append(evs, heartbeat(t, "d1", i), heartbeat(t, "d2", i))
	}
	if err := st.Report(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	_ = srv
	got := map[string]any{}
	s, err := js.Stream(ctx, liveness)
	if err != nil {
		t.Fatalf("stream %s: %v", liveness, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("fleet.report.*.heartbeat"))
	if err != nil {
		t.Fatal(err)
	}
	got["storage"], got["per subject"], got["held"] = info.Config.Storage.String(), info.Config.MaxMsgsPerSubject, info.State.Subjects
	tel, err := js.Stream(ctx, events.StreamTelemetry)
	if err != nil {
		t.Fatal(err)
	}
	got["telemetry subjects"] = tel.CachedInfo().Config.Subjects
	want := map[string]any{
		"storage": jetstream.MemoryStorage.String(), "per subject": int64(1),
		"held":               map[string]uint64{"fleet.report.d1.heartbeat": 1, "fleet.report.d2.heartbeat": 1},
		"telemetry subjects": []string{"fleet.report.*.inventory", "fleet.report.*.containers"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("where heartbeats are kept (-want +got):\n%s", diff)
	}
	// The last heartbeat is read back as before (a direct get).
	last, err := st.Last(ctx, "fleet.report.d1.heartbeat")
	if err != nil || last.Event.ID != evs[len(evs)-2].ID || last.Stream != liveness {
		t.Errorf("Last = %s in %s, %v; want the last heartbeat of d1 in %s", last.Event.ID, last.Stream, err, liveness)
	}
}
