package projections_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	"github.com/nationtech/harmony-fleet/projections"
)

// fuzzDevices are the subjects a fuzzed report is stored on: the canary, two
// other targets and a device outside the revision.
var fuzzDevices = []string{"canary-a", "edge-b", "edge-c", "stranger"}

// canaryStage is revision u1/1 of lab/api (targets canary-a, edge-b,
// edge-c; canary canary-a) at its canary stage, edge-b already converged.
func canaryStage(tb testing.TB) projections.Rollout {
	tb.Helper()
	dep := events.Keys{Namespace: "lab", Name: "api"}
	var r projections.Rollout
	apply := func(keys events.Keys, d events.Data) {
		ev, err := events.New(keys, d, events.WithTime(t0))
		if err != nil {
			tb.Fatal(err)
		}
		r = r.Apply(ev)
	}
	apply(dep, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "r", Targets: fuzzDevices[:3], Canaries: fuzzDevices[:1]})
	for _, tr := range r.Next() {
		apply(dep, tr)
	}
	apply(events.Keys{Device: "edge-b"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
		Phase: events.WorkloadConverged, Since: t0})
	if r.Stage != projections.StageCanary {
		tb.Fatalf("setup: stage %s", r.Stage)
	}
	return r
}

// FuzzReportFold stores an arbitrary payload on one device's workload
// subject and runs it through what the rollout runner does with a record:
// DecodeStored, then the rollout fold (in place, as the runner folds, and as
// a value, as history folds). Whatever the payload, nothing panics, a refusal
// is a located *RecordError, both folds agree, and only the device of the
// subject can change: a report stored on another device's subject never
// converges or fails the canary, so it never releases or fails the rollout.
// `go test` runs it over the seed corpus; `go test -fuzz FuzzReportFold`
// explores.
func FuzzReportFold(f *testing.F) {
	seed := func(keys events.Keys, d events.WorkloadStatus) {
		ev, err := events.New(keys, d, events.WithCorrelation(d.UID, d.Generation))
		if err != nil {
			f.Fatal(err)
		}
		b, err := ev.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		for i := range fuzzDevices {
			f.Add(b, uint8(i))
		}
		for _, tc := range poisontest.For(f, ev) {
			if len(tc.Payload) < 4096 {
				f.Add(tc.Payload, uint8(0))
				f.Add(tc.Payload, uint8(1))
			}
		}
	}
	for _, dev := range fuzzDevices {
		for _, ph := range []events.WorkloadPhase{events.WorkloadConverged, events.WorkloadFailed, events.WorkloadApplying, "Exploded"} {
			seed(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1, Phase: ph,
				Error: "x", Since: t0.Add(time.Second)})
		}
	}
	seed(events.Keys{Device: "canary-a"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u2", Generation: 7, Phase: events.WorkloadConverged})
	seed(events.Keys{Device: "canary-a"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1, Phase: events.WorkloadConverged,
		Since: t0.Add(-time.Hour)})

	base := canaryStage(f)
	f.Fuzz(func(t *testing.T, payload []byte, which uint8) {
		device := fuzzDevices[int(which)%len(fuzzDevices)]
		subject, err := events.ReportSubject(device, events.ReportWorkload)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := events.DecodeStored(subject, payload)
		if err != nil {
			if re, ok := events.AsRecordError(err); !ok || !errors.Is(err, events.ErrUndecodable) || re.Subject != subject || re.Reason == "" {
				t.Fatalf("refusal %v is not a located *RecordError", err)
			}
			return
		}
		if ev.Keys.Device != device {
			t.Fatalf("accepted keys %+v on %s", ev.Keys, subject)
		}
		before := canaryStage(t)
		inPlace := canaryStage(t)
		inPlace.Fold(ev)
		asValue := base.Apply(ev)
		if diff := cmp.Diff(asValue.Results, inPlace.Results); diff != "" || asValue.Counts() != inPlace.Counts() {
			t.Fatalf("in-place and value folds differ: results %s, counts %+v vs %+v", diff, inPlace.Counts(), asValue.Counts())
		}
		if diff := cmp.Diff(before, base, cmpopts.IgnoreUnexported(projections.Rollout{})); diff != "" {
			t.Fatalf("Apply changed the state it was called on:\n%s", diff)
		}
		// The folds keep their counts report by report; a state restored
		// from JSON (the runner's checkpoint) counts again from the results.
		b, err := json.Marshal(inPlace)
		if err != nil {
			t.Fatal(err)
		}
		var restored projections.Rollout
		if err := json.Unmarshal(b, &restored); err != nil {
			t.Fatal(err)
		}
		if got, want := inPlace.Counts(), restored.Counts(); got != want {
			t.Fatalf("counts %+v, recounted %+v", got, want)
		}
		for _, other := range fuzzDevices {
			if other != device && inPlace.Results[other] != before.Results[other] {
				t.Fatalf("a report stored on %s changed %s's result: %+v → %+v", subject, other, before.Results[other], inPlace.Results[other])
			}
		}
		if device != "canary-a" {
			if next := inPlace.Next(); len(next) != 0 {
				t.Fatalf("a report stored on %s moved the canary stage: %v", subject, next)
			}
		}
		c := inPlace.Counts()
		if c.Total != 3 || c.Canaries != 1 || c.Succeeded+c.Failed+c.Pending != c.Total || c.CanariesSucceeded+c.CanariesFailed > 1 {
			t.Fatalf("counts %+v", c)
		}
	})
}
