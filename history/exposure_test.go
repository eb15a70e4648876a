package history_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// scoredRevision appends a revision of lab/<name> whose score runs image,
// as the Deployment controller does.
func (f *fleetRun) scoredRevision(name, uid string, gen int64, image string, targets, canaries []string, plan *events.RolloutPlan, batches []int) events.DeploymentRevisionCreated {
	f.t.Helper()
	rev := events.DeploymentRevisionCreated{UID: uid, Generation: gen, RevisionID: fmt.Sprintf("%d-%s", gen, uid[:4]),
		ScoreDigest: fmt.Sprintf("sha256:%s%d", name, gen),
		Score:       json.RawMessage(fmt.Sprintf(`{"type":"PodmanV0","data":{"services":[{"name":"%s","image":"%s"},{"name":"sidecar","image":"registry.example.com/proxy:1"}]}}`, name, image)),
		Targets:     targets, Canaries: canaries, Plan: plan, TargetBatches: batches}
	f.append(events.Keys{Namespace: "lab", Name: name}, rev, events.WithCorrelation(uid, gen))
	return rev
}

// agentReport stores a workload report as an agent does and returns its
// event id.
func (f *fleetRun) agentReport(device, name string, uid string, gen int64, revID string, phase events.WorkloadPhase, errText string) string {
	f.t.Helper()
	d := events.WorkloadStatus{Namespace: "lab", Deployment: name, UID: uid, Generation: gen, RevisionID: revID,
		Phase: phase, Error: errText, Since: time.Now().UTC()}
	return f.append(events.Keys{Device: device}, d, events.WithCorrelation(uid, gen)).ID.String()
}

// waitIntent waits until device's fleet-intent value runs generation gen
// of lab/name (0: not at all), as an agent waits for its intent.
func (f *fleetRun) waitIntent(device, name string, gen int64) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("%s's intent to run %s generation %d", device, name, gen), func() bool { return f.intentGen(device, name) == gen })
}

// TestExposureListsEveryDeviceThatRanAnImageWithItsIntervals runs the
// operator's rollout runner through four revisions of lab/api (v1; v2
// rolled back by its plan; v3 whose canary failed and was never released;
// v1 again without d2, which removes it) while the test plays the agents,
// one of them crash-looping, and a device stores a report that does not
// decode. Each image's exposure is then checked exactly against the raw
// reports: which devices, under which revision, from which report to which.
func TestExposureListsEveryDeviceThatRanAnImageWithItsIntervals(t *testing.T) {
	f := startFleet(t)
	all := []string{"d1", "d2", "d3"}
	ids := map[string]string{} // "device gen phase#n" → event id
	seen := map[string]int{}
	report := func(dev string, rev events.DeploymentRevisionCreated, gen int64, revID string, phase events.WorkloadPhase, errText string) {
		k := fmt.Sprintf("%s g%d %s", dev, gen, phase)
		seen[k]++
		ids[fmt.Sprintf("%s#%d", k, seen[k])] = f.agentReport(dev, "api", rev.UID, gen, revID, phase, errText)
	}
	converge := func(dev string, rev events.DeploymentRevisionCreated) {
		f.waitIntent(dev, "api", rev.Generation)
		report(dev, rev, rev.Generation, rev.RevisionID, events.WorkloadApplying, "")
		report(dev, rev, rev.Generation, rev.RevisionID, events.WorkloadConverged, "")
	}

	// v1: canary d1, then d2 and d3; d3 crash-loops after converging.
	g1 := f.scoredRevision("api", "a1b2c3", 1, "registry.example.com/api:v1", all, []string{"d1"}, nil, nil)
	for _, d := range all {
		converge(d, g1)
	}
	f.waitPhase("api", 1, fleetv1.PhaseSucceeded)
	for range 2 {
		f.health("d3", g1, events.TypeWorkloadDegraded, events.HealthCrashLoop, 300)
	}
	// A device's report that does not decode: skipped and counted.
	f.storeRaw(&nats.Msg{Subject: "fleet.report.d2.workload", Data: []byte(`{"specversion":"1.0","type":"device.workload.status","data":`)})

	// v2 (pinned by digest): the canary converges, batch 1 fails on d3,
	// the plan rolls every device back to generation 1.
	g2 := f.scoredRevision("api", "a1b2c3", 2, "registry.example.com/api@sha256:2222", all, []string{"d1"},
		&events.RolloutPlan{OnFailure: events.OnFailureRollback, Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}}}, []int{0, 1, 1})
	converge("d1", g2)
	converge("d2", g2)
	f.waitIntent("d3", "api", 2)
	report("d3", g2, 2, g2.RevisionID, events.WorkloadApplying, "")
	report("d3", g2, 2, g2.RevisionID, events.WorkloadFailed, "api exited with 2")
	f.waitPhase("api", 2, fleetv1.PhaseFailed)
	for _, d := range all {
		converge(d, g1)
	}

	// v3: its canary fails; the rest is never released.
	g3 := f.scoredRevision("api", "a1b2c3", 3, "registry.example.com/api:v3", all, []string{"d1"}, nil, nil)
	f.waitIntent("d1", "api", 3)
	report("d1", g3, 3, g3.RevisionID, events.WorkloadApplying, "")
	report("d1", g3, 3, g3.RevisionID, events.WorkloadFailed, "pull: manifest unknown")
	f.waitPhase("api", 3, fleetv1.PhaseFailed)

	// v1 again, without d2: d2 removes the Deployment.
	g4 := f.scoredRevision("api", "a1b2c3", 4, "registry.example.com/api:v1", []string{"d1", "d3"}, nil, nil, nil)
	converge("d1", g4)
	converge("d3", g4)
	f.waitIntent("d2", "api", 0)
	report("d2", g1, 1, g1.RevisionID, events.WorkloadRemoved, "")
	f.waitPhase("api", 4, fleetv1.PhaseSucceeded)

	// The raw reports: when the stream stored each.
	stored := map[string]time.Time{}
	for rec, err := range f.store.ReplaySubjects(f.ctx, []string{"fleet.report.*.workload"}, events.FromStart()) {
		if err != nil {
			if _, ok := events.AsRecordError(err); ok {
				continue
			}
			t.Fatal(err)
		}
		stored[rec.Event.ID.String()] = rec.Stored.UTC()
	}
	now := time.Now().Add(time.Hour).UTC()
	iv := func(dev string, rev events.DeploymentRevisionCreated, role, since, converged, until, end string, endGen int64, last events.WorkloadPhase, failed bool, degraded int) history.ExposureInterval {
		t.Helper()
		at := func(k string) (time.Time, string) {
			if k == "" {
				return time.Time{}, ""
			}
			id, ok := ids[k]
			if !ok {
				t.Fatalf("no report %q was stored", k)
			}
			return stored[id], id
		}
		x := history.ExposureInterval{Device: dev, Deployment: "lab/api", UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID,
			Role: role, End: end, EndGeneration: endGen, LastPhase: last, Failed: failed, Degraded: degraded}
		x.Since, x.SinceEvent = at(since)
		x.Converged, _ = at(converged)
		x.Until, x.UntilEvent = at(until)
		to := x.Until
		if end == history.EndRunning {
			to = now
		}
		x.Hours = to.Sub(x.Since).Hours()
		return x
	}
	C, F := events.WorkloadConverged, events.WorkloadFailed

	tests := []struct {
		name    string
		query   history.ExposureQuery
		want    []history.ExposureInterval
		devices int
		running int
	}{
		{"a tag lists every run of v1: replaced, rolled back to, removed, crash-looping and still running",
			history.ExposureQuery{Image: "registry.example.com/api:v1"},
			[]history.ExposureInterval{
				iv("d1", g1, "canary", "d1 g1 Applying#1", "d1 g1 Converged#1", "d1 g2 Applying#1", history.EndReplaced, 2, C, false, 0),
				iv("d1", g1, "canary", "d1 g1 Applying#2", "d1 g1 Converged#2", "d1 g3 Applying#1", history.EndReplaced, 3, C, false, 0),
				iv("d1", g4, "target", "d1 g4 Applying#1", "d1 g4 Converged#1", "", history.EndRunning, 0, C, false, 0),
				iv("d2", g1, "target", "d2 g1 Applying#1", "d2 g1 Converged#1", "d2 g2 Applying#1", history.EndReplaced, 2, C, false, 0),
				iv("d2", g1, "target", "d2 g1 Applying#2", "d2 g1 Converged#2", "d2 g1 Removed#1", history.EndRemoved, 0, C, false, 0),
				iv("d3", g1, "target", "d3 g1 Applying#1", "d3 g1 Converged#1", "d3 g2 Applying#1", history.EndReplaced, 2, C, false, 2),
				iv("d3", g1, "target", "d3 g1 Applying#2", "d3 g1 Converged#2", "d3 g4 Applying#1", history.EndReplaced, 4, C, false, 0),
				iv("d3", g4, "target", "d3 g4 Applying#1", "d3 g4 Converged#1", "", history.EndRunning, 0, C, false, 0),
			}, 3, 2},
		{"a digest lists the rolled-back revision, its failed device included",
			history.ExposureQuery{Image: "sha256:2222"},
			[]history.ExposureInterval{
				iv("d1", g2, "canary", "d1 g2 Applying#1", "d1 g2 Converged#1", "d1 g1 Applying#2", history.EndRolledBack, 1, C, false, 0),
				iv("d2", g2, "target", "d2 g2 Applying#1", "d2 g2 Converged#1", "d2 g1 Applying#2", history.EndRolledBack, 1, C, false, 0),
				iv("d3", g2, "target", "d3 g2 Applying#1", "", "d3 g1 Applying#2", history.EndRolledBack, 1, F, true, 0),
			}, 3, 0},
		{"a canary that was never released is the only device of its revision",
			history.ExposureQuery{Image: "registry.example.com/api:v3"},
			[]history.ExposureInterval{
				iv("d1", g3, "canary", "d1 g3 Applying#1", "", "d1 g4 Applying#1", history.EndReplaced, 4, F, true, 0),
			}, 1, 0},
		{"a score digest and a Deployment narrow to one revision",
			history.ExposureQuery{ScoreDigest: "sha256:api4", Deployment: "lab/api"},
			[]history.ExposureInterval{
				iv("d1", g4, "target", "d1 g4 Applying#1", "d1 g4 Converged#1", "", history.EndRunning, 0, C, false, 0),
				iv("d3", g4, "target", "d3 g4 Applying#1", "d3 g4 Converged#1", "", history.EndRunning, 0, C, false, 0),
			}, 2, 2},
	}
	skips := events.NewSkipCounter()
	h, err := history.New(history.Options{Reader: f.store, Skips: skips})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.query.Now = now
			got, err := h.Exposure(context.Background(), tc.query)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Intervals); diff != "" {
				t.Errorf("intervals (-want +got):\n%s", diff)
			}
			var hours float64
			for _, x := range tc.want {
				hours += x.Hours
			}
			if got.Devices != tc.devices || got.Running != tc.running || fmt.Sprintf("%.6f", got.DeviceHours) != fmt.Sprintf("%.6f", hours) {
				t.Errorf("totals: %d devices, %d running, %.6f device-hours; want %d, %d, %.6f", got.Devices, got.Running, got.DeviceHours,
					tc.devices, tc.running, hours)
			}
		})
	}
	if n := skips.Skipped(events.StreamReports, events.ReasonNotAnEnvelope); n == 0 {
		t.Errorf("the report that does not decode was not counted as skipped")
	}
	t.Run("a backup restored into a fresh server gives the same answer", func(t *testing.T) {
		q := history.ExposureQuery{Image: "registry.example.com/api", Now: now}
		want, err := h.Exposure(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		restored, err := history.New(history.Options{Reader: restoreBackup(t, f.ctx, f.store.JetStream().Conn().ConnectedUrl())})
		if err != nil {
			t.Fatal(err)
		}
		got, err := restored.Exposure(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the restored streams answer differently (-original +restored):\n%s", diff)
		}
		if len(got.Intervals) != 12 {
			t.Errorf("%d intervals for every tag of the repository, want 12 (8 of v1, 3 of v2, 1 of v3)", len(got.Intervals))
		}
	})
}

// restoreBackup backs the account of the server at url up with the nats
// CLI as docs/operations.md says, restores it into a fresh server and
// returns a store on it.
func restoreBackup(t *testing.T, ctx context.Context, url string) *events.Store {
	t.Helper()
	cli := os.Getenv("FLEET_NATS_CLI")
	if cli == "" {
		cli = filepath.Join("..", ".cache", "tools", "natscli-v0.5.0", "nats")
	}
	cli, err := filepath.Abs(cli)
	if err == nil {
		_, err = exec.LookPath(cli)
	}
	if err != nil {
		testenv.Missing(t, "the nats CLI v0.5.0", "go tool -modfile=tools/go.mod task setup:natscli", err)
	}
	run := func(url string, args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, cli, append([]string{"--server", url}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "fleet-backup")
	run(url, "backup", "account", dir, "--force")
	// As docs/operations.md says: FLEET_LIVENESS is soft state in memory
	// (ADR 0024), with no snapshot to restore.
	if err := os.RemoveAll(filepath.Join(dir, events.StreamLiveness)); err != nil {
		t.Fatal(err)
	}
	dst := natstest.Start(t, "")
	run(dst.ClientURL(), "backup", "restore", "account", dir)
	st, err := events.NewStore(natstest.Connect(t, dst), events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestExposureQuestionsThatCannotBeAnsweredSayWhy checks the errors of bad
// and unmatched queries.
func TestExposureQuestionsThatCannotBeAnsweredSayWhy(t *testing.T) {
	f := startFleet(t)
	f.scoredRevision("api", "a1b2c3", 1, "registry.example.com/api:v1", []string{"d1"}, nil, nil, nil)
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		query history.ExposureQuery
		is    error
		says  string
	}{
		{"an empty query names the flags", history.ExposureQuery{}, history.ErrInvalidQuery, "give --image"},
		{"an image with a space is refused", history.ExposureQuery{Image: "api v1"}, history.ErrInvalidQuery, "no spaces"},
		{"a digest that is not sha256 is refused", history.ExposureQuery{Image: "api@md5:1"}, history.ErrInvalidQuery, "starts with sha256: "},
		{"a Deployment without a namespace is refused", history.ExposureQuery{Image: "api:v1", Deployment: "api"}, history.ErrInvalidQuery, "<namespace>/<name>"},
		{"an image no revision runs has no events", history.ExposureQuery{Image: "registry.example.com/api:v9"}, history.ErrNoEvents, "no revision's score matches"},
		{"the repository alone matches but not another Deployment", history.ExposureQuery{Image: "registry.example.com/api", Deployment: "lab/web"}, history.ErrNoEvents, "Deployment lab/web"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.Exposure(context.Background(), tc.query)
			if !errors.Is(err, tc.is) || !strings.Contains(fmt.Sprint(err), tc.says) {
				t.Errorf("error %v; want %v saying %q", err, tc.is, tc.says)
			}
		})
	}
}
