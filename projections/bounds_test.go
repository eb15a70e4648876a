package projections_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// hostileError is what a hostile device reports instead of the 4 KiB the
// agent cuts an error to: 60 KiB of control bytes (each one six bytes once
// escaped) with every hidden character.
var hostileError = poisontest.Hidden + strings.Repeat("\x1b\x00\r", 20<<10)

// statusSchema reads the status schema of the CRD file name from the
// generated manifests.
func statusSchema(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../k8s/config/crd/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	if len(crd.Spec.Versions) != 1 {
		t.Fatalf("%s: %d versions, want 1", name, len(crd.Spec.Versions))
	}
	props, _ := crd.Spec.Versions[0].Schema.OpenAPIV3Schema["properties"].(map[string]any)
	st, ok := props["status"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no status schema", name)
	}
	return st
}

// checkBounds reports every string of v (a status as JSON) longer than its
// schema's maxLength or than most, and every list longer than its
// maxItems: what the API server refuses, and what would make one device's
// text grow an object towards etcd's limit.
func checkBounds(t *testing.T, path string, schema map[string]any, v any, most int) {
	t.Helper()
	switch v := v.(type) {
	case string:
		if ml, ok := schema["maxLength"].(float64); ok && len(v) > int(ml) {
			t.Errorf("%s: %d bytes, over the CRD's maxLength %d: the API server refuses the status", path, len(v), int(ml))
		} else if len(v) > most {
			t.Errorf("%s: %d bytes, over the control plane's bound %d", path, len(v), most)
		}
	case []any:
		if mi, ok := schema["maxItems"].(float64); ok && len(v) > int(mi) {
			t.Errorf("%s: %d items, over the CRD's maxItems %d", path, len(v), int(mi))
		}
		items, _ := schema["items"].(map[string]any)
		for i, e := range v {
			checkBounds(t, fmt.Sprintf("%s[%d]", path, i), items, e, most)
		}
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		for k, e := range v {
			sub, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("%s.%s: not in the CRD's schema", path, k)
				continue
			}
			checkBounds(t, path+"."+k, sub, e, most)
		}
	}
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestADevicesOversizedTextKeepsTheDeploymentStatusWithinTheCRD: a hostile
// device's 60 KiB error of control bytes, as the latest failure and as the
// reason the rollout paused, gives a Deployment status whose every string
// is within the CRD's maxLength (else the server-side apply is refused on
// every tick) and the control plane's bound, still escaped.
func TestADevicesOversizedTextKeepsTheDeploymentStatusWithinTheCRD(t *testing.T) {
	schema := statusSchema(t, "fleet.nationtech.io_deployments.yaml")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := func() projections.Rollout {
		return projections.Rollout{UID: "u1", Generation: 1, RevisionID: "1-abc", Targets: []string{"d1", "d2"}, Stage: projections.StageReleased,
			ReleasedAll: true, StageAt: t0, ProgressAt: t0, ProgressDeadline: time.Minute,
			Results: map[string]projections.DeviceResult{
				"d1": {Phase: events.WorkloadFailed, Error: hostileError, Since: t0},
				"d2": {Phase: events.WorkloadApplying, Error: hostileError, Since: t0},
			},
			LastFailure: &events.RolloutTransition{Device: "d1", Error: hostileError}, LastFailAt: t0}
	}
	tests := []struct {
		name string
		edit func(r *projections.Rollout)
	}{
		{"a rollout with a device's oversized failure", func(r *projections.Rollout) { r.ProgressDeadline = 0 }},
		{"a rollout paused by a device's oversized failure", func(r *projections.Rollout) {
			r.Paused, r.PausedBy, r.PauseReason = true, "rollout", "batch 1 failed: "+hostileError
		}},
		{"a rollout past its progress deadline waiting on a device's oversized error", func(*projections.Rollout) {}},
		{"a failed rollout with a device's oversized failure", func(r *projections.Rollout) { r.Stage = projections.StageFailed }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			tc.edit(&r)
			st, ok := r.StatusAt(t0.Add(time.Hour), 0)
			if !ok {
				t.Fatal("no status")
			}
			checkBounds(t, "status", schema, asJSON(t, st), projections.MaxConditionMessage)
			b, _ := json.Marshal(st)
			for _, raw := range []string{"\x1b", "\x00", "\r", "\u202e"} {
				if strings.Contains(string(b), raw) {
					t.Errorf("the status holds %q raw", raw)
				}
			}
			if st.LatestFailure == nil || !strings.HasPrefix(st.LatestFailure.Error, `v1\u202egnp.exe`) {
				t.Errorf("the latest failure is not the device's error escaped: %.80q", st.LatestFailure)
			}
		})
	}
}

// TestADevicesOversizedTextKeepsTheTaskRunStatusWithinTheCRD: every target
// of a TaskRun with as many results as its status lists reports a 60 KiB
// error and agent version of control bytes; the status stays within the
// CRD's bounds and the control plane's, far from etcd's 1.5 MiB.
func TestADevicesOversizedTextKeepsTheTaskRunStatusWithinTheCRD(t *testing.T) {
	schema := statusSchema(t, "fleet.nationtech.io_taskruns.yaml")
	var targets []string
	for i := range fleetv1.MaxTaskRunResults {
		targets = append(targets, fmt.Sprintf("d%02d", i))
	}
	f := projections.NewTaskRuns()
	if err := f.ApplyIntent(createdRecord(t, "u", targets...)); err != nil {
		t.Fatal(err)
	}
	for i, d := range targets {
		r := foldRecord(t, uint64(i+2), events.Keys{Device: d}, events.TaskStatus{Namespace: "lab", TaskRun: "upgrade", UID: "u",
			Task: events.TaskSystemUpgrade, Phase: events.TaskFailed, Error: hostileError, AgentVersion: hostileError, Since: time.Unix(200, 0)})
		r.Stored = time.Unix(200, 0)
		if why, err := f.ApplyReport(r); err != nil || why != "" {
			t.Fatalf("report of %s: ignored %q, %v", d, why, err)
		}
	}
	st, ok := f.Status(upgrade)
	if !ok || len(st.Results) != len(targets) {
		t.Fatalf("status %v with %d results, want %d", ok, len(st.Results), len(targets))
	}
	checkBounds(t, "status", schema, asJSON(t, st), projections.MaxConditionMessage)
	b, _ := json.Marshal(st)
	if len(b) > 512<<10 {
		t.Errorf("the status is %d bytes: one device's text grows the TaskRun towards etcd's limit", len(b))
	}
	if strings.ContainsAny(string(b), "\x1b\x00\r\u202e") {
		t.Error("the status holds a hidden character raw")
	}
	for _, r := range st.Results {
		if len(r.AgentVersion) > projections.MaxAgentVersionText || len(r.Message) > projections.MaxDeviceText {
			t.Errorf("%s: agent version of %d bytes, message of %d", r.Device, len(r.AgentVersion), len(r.Message))
		}
	}
}
