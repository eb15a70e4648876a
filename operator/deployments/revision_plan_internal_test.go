package deployments

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/score"
)

// beforePlans is the data of the revision below as the operator wrote it
// before rollout plans existed (ADR 0016), byte for byte (taken from the
// build before the plan fields were added).
const beforePlans = `{"uid":"uid-1","generation":3,"revisionId":"3-82bdb855",` +
	`"scoreDigest":"sha256:82bdb85534f87cea9ef5eebf04603db80eea6e590f4b0d9a449357c6368c02dd",` +
	`"score":{"type":"PodmanV0","data":{"services":[{"name":"api","image":"registry.example.com/api:v1"}]}},` +
	`"targets":["rpi-1","rpi-2"],"canaries":["rpi-1"]}`

func planTestDeployment(rollout fleetv1.RolloutSpec) *fleetv1.Deployment {
	return &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "api", UID: "uid-1", Generation: 3},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "x"}}, Rollout: rollout,
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1"}}}}}}
}

func TestARevisionWithoutRolloutControlsHasTheBytesOfBefore(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	tests := []struct {
		name    string
		rollout fleetv1.RolloutSpec
	}{
		{"no rollout at all", fleetv1.RolloutSpec{}},
		{"the strategy alone", fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate}},
		{"the strategy, approval and onFailure the API server defaults", fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate,
			Approval: fleetv1.RolloutApprovalAutomatic, OnFailure: fleetv1.RolloutOnFailureFail}},
		{"an empty batch list", fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Batches: []fleetv1.RolloutBatch{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(tc.rollout)
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, _, err := RevisionEvents(d, res)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || string(evs[0].Data) != beforePlans {
				t.Errorf("%d events, the revision's data\n%s\nwant\n%s", len(evs), evs[0].Data, beforePlans)
			}
		})
	}
	t.Run("chunked, its chunks carry no targetBatches", func(t *testing.T) {
		defer SetRevisionChunkBytes(10)()
		d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate})
		res, err := ResolveTargets(context.Background(), d, devices, nil)
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := RevisionEvents(d, res)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) < 3 {
			t.Fatalf("%d events, want chunks", len(evs))
		}
		for _, ev := range evs {
			if strings.Contains(string(ev.Data), "targetBatches") || strings.Contains(string(ev.Data), "plan") {
				t.Errorf("a %s event without a plan has plan fields: %s", ev.Type, ev.Data)
			}
		}
	})
}

func TestARevisionWithAPlanOfAHundredThousandTargetsIsAppendedAndAssembledWithItsBatchesAligned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	const n = 100000
	devices := make([]fleetv1.Device, n)
	for i := range devices {
		labels := map[string]string{"role": "x", "site": "a"}
		switch {
		case i%1000 == 0:
			labels["canary"] = "true"
		case i%10 == 3:
			labels["site"] = "b"
		}
		devices[i] = fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: fmt.Sprintf("edge-device-%06d", i), Labels: labels}}
	}
	d := planTestDeployment(fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{
		{Count: new(int32(1000)), SuccessThreshold: 95, Soak: "10m"},
		{Percent: new(int32(10))},
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "b"}}},
	}, Approval: fleetv1.RolloutApprovalManual})
	d.Namespace = "big"
	res, err := ResolveTargets(ctx, d, devices, nil)
	if err != nil {
		t.Fatal(err)
	}
	// 100 canaries; 10,000 of site b; then 1,000 and 10,000 in id order;
	// the 78,900 others last.
	wantPlan := &events.RolloutPlan{Batches: []events.PlanBatch{
		{Size: 1000, SuccessPercent: 95, SoakSeconds: 600}, {Size: 10000, SuccessPercent: 100}, {Size: 10000, SuccessPercent: 100}, {Size: 78900, SuccessPercent: 100},
	}, Approval: events.ApprovalManual}
	if diff := cmp.Diff(wantPlan, res.Plan); diff != "" {
		t.Fatalf("plan (-want +got):\n%s", diff)
	}

	evs, want, err := RevisionEvents(d, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 3 {
		t.Fatalf("%d events, want chunks and the revision", len(evs))
	}
	for _, ev := range evs[:len(evs)-1] {
		c, err := events.Decode[events.DeploymentRevisionTargets](ev)
		if err != nil || len(c.TargetBatches) != len(c.Targets) {
			t.Fatalf("chunk %d: %d batch entries for %d targets (%v)", c.Chunk, len(c.TargetBatches), len(c.Targets), err)
		}
	}
	var head map[string]json.RawMessage
	if err := json.Unmarshal(evs[len(evs)-1].Data, &head); err != nil {
		t.Fatal(err)
	}
	if _, ok := head["targetBatches"]; ok {
		t.Error("the revision event of a chunked revision carries targetBatches")
	}
	if _, ok := head["plan"]; !ok {
		t.Error("the revision event lacks its plan")
	}
	subject, err := events.DeploymentIntentSubject(d.Namespace, d.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := AppendRevision(ctx, st, evs, 0); err != nil {
		t.Fatal(err)
	}
	h, err := intent.ReadHead(ctx, st, st, nil, log, subject)
	if err != nil {
		t.Fatal(err)
	}
	if rev, done := intent.AppendedRevision(h.Last, d); !done || rev.TargetChunks != len(evs)-1 {
		t.Fatalf("head after the append: %s appended %v", rev.RevisionID, done)
	}

	whole := assembledRevisions(t, ctx, st, subject)
	if len(whole) != 1 {
		t.Fatalf("%d revisions assembled, want 1", len(whole))
	}
	if diff := cmp.Diff(want, whole[0]); diff != "" {
		t.Fatalf("the assembled revision differs from the frozen one (-want +got):\n%s", diff)
	}
	// Spot checks of the alignment: a canary; the first and last targets
	// of the count batch (0..1112 less the canaries and site b); site b
	// devices (batch 3, claimed first); the first of the percent batch;
	// the last target, in the batch of the rest.
	for _, c := range []struct {
		device string
		batch  int
	}{{"edge-device-000000", 0}, {"edge-device-000001", 1}, {"edge-device-000003", 3}, {"edge-device-001112", 1},
		{"edge-device-001113", 3}, {"edge-device-001114", 2}, {"edge-device-099999", 4}} {
		i, ok := slices.BinarySearch(whole[0].Targets, c.device)
		if !ok {
			t.Fatalf("%s is not a target", c.device)
		}
		if got := whole[0].TargetBatches[i]; got != c.batch {
			t.Errorf("%s: batch %d, want %d", c.device, got, c.batch)
		}
	}
}

// TestAProgressDeadlineIsFrozenOnlyWhenSet: a Deployment without
// spec.rollout.progressDeadline writes the revision bytes of before; one
// with it adds progressDeadlineSeconds and nothing else.
func TestAProgressDeadlineIsFrozenOnlyWhenSet(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	for _, tc := range []struct {
		name     string
		deadline *metav1.Duration
		want     string
	}{
		{"without a deadline the bytes are those of before", nil, beforePlans},
		{"a deadline of 30s is frozen in seconds", &metav1.Duration{Duration: 30 * time.Second},
			strings.TrimSuffix(beforePlans, "}") + `,"progressDeadlineSeconds":30}`},
		{"a deadline of 1h30m is frozen in seconds", &metav1.Duration{Duration: 90 * time.Minute},
			strings.TrimSuffix(beforePlans, "}") + `,"progressDeadlineSeconds":5400}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, ProgressDeadline: tc.deadline})
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, _, err := RevisionEvents(d, res)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(evs[len(evs)-1].Data)); len(evs) != 1 || diff != "" {
				t.Errorf("%d events; the revision's data (-want +got):\n%s", len(evs), diff)
			}
		})
	}
}

// TestAMinReadyIsFrozenOnlyWhenSet: a Deployment without
// spec.rollout.minReady, or with 0s, writes the revision bytes of before;
// one with it adds minReadySeconds and nothing else.
func TestAMinReadyIsFrozenOnlyWhenSet(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	for _, tc := range []struct {
		name     string
		minReady *metav1.Duration
		deadline *metav1.Duration
		want     string
	}{
		{"without minReady the bytes are those of before", nil, nil, beforePlans},
		{"a minReady of 0s writes the bytes of before", &metav1.Duration{}, nil, beforePlans},
		{"a minReady of 30s is frozen in seconds", &metav1.Duration{Duration: 30 * time.Second}, nil,
			strings.TrimSuffix(beforePlans, "}") + `,"minReadySeconds":30}`},
		{"a minReady under a second is frozen as one second", &metav1.Duration{Duration: 300 * time.Millisecond}, nil,
			strings.TrimSuffix(beforePlans, "}") + `,"minReadySeconds":1}`},
		{"minReady and a deadline are both frozen", &metav1.Duration{Duration: 2 * time.Minute}, &metav1.Duration{Duration: 5 * time.Minute},
			strings.TrimSuffix(beforePlans, "}") + `,"progressDeadlineSeconds":300,"minReadySeconds":120}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, MinReady: tc.minReady, ProgressDeadline: tc.deadline})
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, _, err := RevisionEvents(d, res)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(evs[len(evs)-1].Data)); len(evs) != 1 || diff != "" {
				t.Errorf("%d events; the revision's data (-want +got):\n%s", len(evs), diff)
			}
		})
	}
}

// TestFollowIsFrozenOnlyWhenSet: a Deployment without
// spec.rollout.targets, or with Frozen, writes the revision bytes of
// before; one with Follow adds "follow":true and nothing else (ADR 0026).
func TestFollowIsFrozenOnlyWhenSet(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	for _, tc := range []struct {
		name    string
		targets fleetv1.RolloutTargets
		want    string
	}{
		{"without targets the bytes are those of before", "", beforePlans},
		{"targets Frozen writes the bytes of before", fleetv1.RolloutTargetsFrozen, beforePlans},
		{"targets Follow adds follow and nothing else", fleetv1.RolloutTargetsFollow, strings.TrimSuffix(beforePlans, "}") + `,"follow":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Targets: tc.targets})
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, _, err := RevisionEvents(d, res)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(evs[len(evs)-1].Data)); len(evs) != 1 || diff != "" {
				t.Errorf("%d events; the revision's data (-want +got):\n%s", len(evs), diff)
			}
		})
	}
}

// TestAFollowRevisionFreezesItsBatchSelectors: a Follow revision's plan
// keeps each selector batch's matchLabels (ADR 0026: a follower joins the
// first selector batch its labels match), a count batch and the leftovers
// none; a Frozen revision of the same spec keeps no selector, so its
// bytes are those of before.
func TestAFollowRevisionFreezesItsBatchSelectors(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "site": "lyon"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x", "site": "paris"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-3", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-4", Labels: map[string]string{"role": "x"}}},
	}
	one := int32(1)
	batches := []fleetv1.RolloutBatch{
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "moon"}}}, // resolves to none: dropped
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "paris"}}},
		{Count: &one},
	}
	for _, tc := range []struct {
		name    string
		targets fleetv1.RolloutTargets
		want    []map[string]string
	}{
		{"Frozen keeps no selector", fleetv1.RolloutTargetsFrozen, []map[string]string{nil, nil, nil}},
		{"Follow keeps the selectors of the batches the plan kept", fleetv1.RolloutTargetsFollow,
			[]map[string]string{{"site": "paris"}, nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Targets: tc.targets, Batches: batches})
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, data, err := RevisionEvents(d, res)
			if err != nil {
				t.Fatal(err)
			}
			var got []map[string]string
			for _, b := range data.Plan.Batches {
				got = append(got, b.Selector)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("selectors per plan batch (-want +got):\n%s", diff)
			}
			if tc.targets == fleetv1.RolloutTargetsFrozen && strings.Contains(string(evs[len(evs)-1].Data), "selector") {
				t.Errorf("a Frozen revision carries a selector: %s", evs[len(evs)-1].Data)
			}
		})
	}
}
