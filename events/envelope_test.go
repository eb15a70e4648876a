package events_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

func TestNewAndDecode(t *testing.T) {
	data := events.DeploymentRevisionCreated{UID: "u1", Generation: 3, RevisionID: "u1-3", ScoreDigest: "sha256:ab",
		Score: json.RawMessage(`{"services":[]}`), Targets: []string{"a", "b"}, Canaries: []string{"a"}}
	ev, err := events.New(events.Keys{Namespace: "lab", Name: "api"}, data, events.WithCorrelation("u1", 3))
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != events.TypeDeploymentRevisionCreated || ev.Version != 1 {
		t.Errorf("type %q version %d", ev.Type, ev.Version)
	}
	subj, err := ev.Subject()
	if err != nil || subj != "fleet.intent.deployment.lab.api" {
		t.Errorf("subject %q, %v", subj, err)
	}
	payload, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := events.Unmarshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ev.ID, back.ID); diff != "" {
		t.Error(diff)
	}
	got, err := events.Decode[events.DeploymentRevisionCreated](back)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(data, got); diff != "" {
		t.Errorf("decoded data (-want +got):\n%s", diff)
	}
	if back.Correlation == nil || back.Correlation.DeploymentUID != "u1" || back.Correlation.Generation != 3 {
		t.Errorf("correlation %+v", back.Correlation)
	}
}

func TestRolloutTransitionKeepsItsType(t *testing.T) {
	d := events.NewRolloutTransition(events.TypeRolloutCanaryFailed, events.RolloutTransition{UID: "u", Generation: 1, Device: "d1", Error: "exit 1"})
	ev, err := events.New(events.Keys{Namespace: "lab", Name: "api"}, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := events.Decode[events.RolloutTransition](ev)
	if err != nil {
		t.Fatal(err)
	}
	if got.EventType() != events.TypeRolloutCanaryFailed || got.Device != "d1" {
		t.Errorf("got %+v type %q", got, got.EventType())
	}
	if _, err := events.New(events.Keys{Namespace: "lab", Name: "api"}, events.RolloutTransition{}); !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("transition without a type: %v, want ErrUnknownType", err)
	}
}

func TestEnvelopeErrors(t *testing.T) {
	good, err := events.New(events.Keys{Device: "d1"}, events.DeviceHeartbeat{AgentVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		mutate  func(*events.Event)
		wantErr error
		wantMsg string
	}{
		{"an event without a device key for a report is invalid", func(e *events.Event) { e.Keys = events.Keys{} }, events.ErrInvalidEvent, "device"},
		{"an event of an unknown type is invalid", func(e *events.Event) { e.Type = "device.selfie" }, events.ErrInvalidEvent, "device.selfie"},
		{"an event with a zero time is invalid", func(e *events.Event) { e.Time = time.Time{} }, events.ErrInvalidEvent, "time"},
		{"an event whose data is not an object is invalid", func(e *events.Event) { e.Data = json.RawMessage(`[1]`) }, events.ErrInvalidEvent, "JSON object"},
		{"an event with version 0 is invalid", func(e *events.Event) { e.Version = 0 }, events.ErrInvalidEvent, "version"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := good
			tc.mutate(&ev)
			err := ev.Validate()
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("Validate() = %v, want %v mentioning %q", err, tc.wantErr, tc.wantMsg)
			}
		})
	}
	t.Run("decoding into another type's struct fails", func(t *testing.T) {
		if _, err := events.Decode[events.DeviceInventory](good); !errors.Is(err, events.ErrUnknownType) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("decoding a newer schema version fails", func(t *testing.T) {
		ev := good
		ev.Version = 99
		if _, err := events.Decode[events.DeviceHeartbeat](ev); !errors.Is(err, events.ErrUnsupportedVersion) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("decoding ignores fields a newer writer added", func(t *testing.T) {
		ev := good
		ev.Data = json.RawMessage(`{"agentVersion":"2","newField":true}`)
		got, err := events.Decode[events.DeviceHeartbeat](ev)
		if err != nil || got.AgentVersion != "2" {
			t.Errorf("got %+v, %v", got, err)
		}
	})
}

func TestEveryCatalogueTypeHasAStructAndASubject(t *testing.T) {
	keys := events.Keys{Namespace: "lab", Name: "api", Device: "d1"}
	structs := map[events.Type]events.Data{
		events.TypeDeploymentRevisionCreated:  events.DeploymentRevisionCreated{},
		events.TypeDeploymentRevisionTargets:  events.DeploymentRevisionTargets{},
		events.TypeDeploymentDeleted:          events.DeploymentDeleted{},
		events.TypeTaskRunCreated:             events.TaskRunCreated{},
		events.TypeTaskRunTargets:             events.TaskRunTargets{},
		events.TypeTaskRunDeleted:             events.TaskRunDeleted{},
		events.TypeDeviceHeartbeat:            events.DeviceHeartbeat{},
		events.TypeDeviceInventory:            events.DeviceInventory{},
		events.TypeWorkloadStatus:             events.WorkloadStatus{},
		events.TypeTaskStatus:                 events.TaskStatus{},
		events.TypeCommandResult:              events.CommandResult{},
		events.TypeWorkloadDegraded:           events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{}),
		events.TypeWorkloadRecovered:          events.NewWorkloadHealth(events.TypeWorkloadRecovered, events.WorkloadHealth{}),
		events.TypeDeviceContainers:           events.DeviceContainers{},
		events.TypeWorkloadFetch:              events.WorkloadFetch{},
		events.TypeAgentCommand:               events.AgentCommand{},
		events.TypeDashboardDeviceAction:      events.DashboardDeviceAction{},
		events.TypeDashboardAlertAcknowledged: events.DashboardAlertAcknowledged{},
		events.TypeDeviceLogsRequested:        events.DeviceLogsRequested{},
	}
	for _, ti := range events.Catalogue() {
		t.Run(string(ti.Type), func(t *testing.T) {
			d, ok := structs[ti.Type]
			if !ok {
				if ti.Family != events.FamilyDeploymentRollout {
					t.Fatalf("no data struct for %s", ti.Type)
				}
				d = events.NewRolloutTransition(ti.Type, events.RolloutTransition{})
			}
			if d.EventType() != ti.Type {
				t.Fatalf("struct says %s", d.EventType())
			}
			ev, err := events.New(keys, d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ev.Subject(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMarshalMatchesEncodingJSON(t *testing.T) {
	type plain events.Event // no methods: encoding/json's own encoding
	tests := []struct {
		name string
		ev   func() events.Event
	}{
		{"an event with a correlation", func() events.Event {
			ev, _ := events.New(events.Keys{Namespace: "lab", Name: "api"},
				events.NewRolloutTransition(events.TypeRolloutStarted, events.RolloutTransition{UID: "u", Generation: 2}), events.WithCorrelation("u", 2))
			return ev
		}},
		{"a device event without a correlation", func() events.Event {
			ev, _ := events.New(events.Keys{Device: "d-1"}, events.DeviceInventory{OS: "Debian \"12\" <bookworm> & ü", Labels: map[string]string{"role": "x"}})
			return ev
		}},
		{"a correlation uid that needs escaping", func() events.Event {
			ev, _ := events.New(events.Keys{Device: "d"}, events.WorkloadStatus{}, events.WithCorrelation("a\"b\\c\u2028<>&\n", -1),
				events.WithTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
			return ev
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.ev()
			got, err := ev.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(plain(ev))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("Marshal:\n got %s\nwant %s", got, want)
			}
		})
	}
	t.Run("invalid JSON data is refused", func(t *testing.T) {
		ev := tc0(t)
		ev.Data = json.RawMessage(`{"a":`)
		if _, err := ev.Marshal(); !errors.Is(err, events.ErrInvalidEvent) {
			t.Errorf("got %v", err)
		}
		if err := ev.Validate(); !errors.Is(err, events.ErrInvalidEvent) {
			t.Errorf("Validate got %v", err)
		}
	})
}

func tc0(t *testing.T) events.Event {
	ev, err := events.New(events.Keys{Device: "d"}, events.DeviceHeartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
