package projections_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestTheRevisionsWindowsReachTheDevicesValue: a revision's maintenance
// window is in the deployment entry of every device handed it, and its
// fetch window in the fetch entry of every target not handed it yet (ADR
// 0029); a snapshot keeps both.
func TestTheRevisionsWindowsReachTheDevicesValue(t *testing.T) {
	sw := &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}
	fw := &events.MaintenanceWindow{Start: "23:00", Duration: "3h"}
	rev := mustNew(t, dep, events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "r1", ScoreDigest: "sha256:x",
		Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: []string{"a", "b"}, Canaries: []string{"a"}, Prefetch: true,
		Window: sw, FetchWindow: fw})
	s := projections.NewIntent()
	s.Apply(rev)
	s.Apply(relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a"))
	restored := projections.NewIntent()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, restored); err != nil {
		t.Fatal(err)
	}
	for name, fold := range map[string]*projections.Intent{"the live fold": s, "a fold restored from its snapshot": restored} {
		t.Run(name, func(t *testing.T) {
			values := map[string]projections.DeviceIntent{}
			for _, dev := range []string{"a", "b"} {
				raw, ok := fold.Value(dev)
				if !ok {
					t.Fatalf("%s has no value", dev)
				}
				var v projections.DeviceIntent
				if err := json.Unmarshal(raw, &v); err != nil {
					t.Fatal(err)
				}
				values[dev] = v
			}
			if a := values["a"]; len(a.Deployments) != 1 || len(a.Fetch) != 0 {
				t.Fatalf("a (handed the revision): %+v", a)
			}
			if diff := cmp.Diff(sw, values["a"].Deployments[0].Window); diff != "" {
				t.Errorf("the deployment entry's window (-want +got):\n%s", diff)
			}
			if b := values["b"]; len(b.Deployments) != 0 || len(b.Fetch) != 1 {
				t.Fatalf("b (not handed it yet): %+v", b)
			}
			if diff := cmp.Diff(fw, values["b"].Fetch[0].Window); diff != "" {
				t.Errorf("the fetch entry's window (-want +got):\n%s", diff)
			}
		})
	}
}
