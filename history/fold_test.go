package history

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// streamWriter stores events as their writers do: the control plane
// appends, agents report (in batches of distinct devices).
type streamWriter struct {
	tb  testing.TB
	ctx context.Context
	st  *events.Store
}

func (w streamWriter) append(keys events.Keys, d events.Data, uid string, gen int64) {
	w.tb.Helper()
	ev, err := events.New(keys, d, events.WithCorrelation(uid, gen))
	if err != nil {
		w.tb.Fatal(err)
	}
	natstest.Write(w.tb, w.ctx, w.st, ev)
}

// revision appends a revision of namespace/name, in target chunks when
// chunkBytes > 0.
func (w streamWriter) revision(namespace, name string, rev events.DeploymentRevisionCreated, chunkBytes int) {
	w.tb.Helper()
	keys := events.Keys{Namespace: namespace, Name: name}
	created, chunks := events.ChunkRevision(rev, chunkBytes)
	if chunkBytes <= 0 {
		created, chunks = rev, nil
	}
	for _, c := range chunks {
		w.append(keys, c, rev.UID, rev.Generation)
	}
	w.append(keys, created, rev.UID, rev.Generation)
}

// transition appends a rollout transition of rev.
func (w streamWriter) transition(namespace, name string, t events.Type, rev events.DeploymentRevisionCreated, released []string, device, errText string) {
	w.tb.Helper()
	d := events.NewRolloutTransition(t, events.RolloutTransition{UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID,
		Released: released, Device: device, Error: errText})
	w.append(events.Keys{Namespace: namespace, Name: name}, d, rev.UID, rev.Generation)
}

// reports stores one workload report of rev per device, in phase (failed
// for the devices in failed), 1,000 at a time.
func (w streamWriter) reports(namespace, name string, rev events.DeploymentRevisionCreated, devices []string, phase events.WorkloadPhase, failed ...string) {
	w.tb.Helper()
	for c := range slices.Chunk(devices, 1000) {
		evs := make([]events.Event, 0, len(c))
		for _, dev := range c {
			d := events.WorkloadStatus{Namespace: namespace, Deployment: name, UID: rev.UID, Generation: rev.Generation,
				RevisionID: rev.RevisionID, Phase: phase, Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			if slices.Contains(failed, dev) {
				d.Phase, d.Error = events.WorkloadFailed, "image pull: manifest unknown"
			}
			ev, err := events.New(events.Keys{Device: dev}, d, events.WithCorrelation(rev.UID, rev.Generation))
			if err != nil {
				w.tb.Fatal(err)
			}
			evs = append(evs, ev)
		}
		if err := w.st.Report(w.ctx, evs...); err != nil {
			w.tb.Fatal(err)
		}
	}
}

// health stores a device's health report of rev.
func (w streamWriter) health(namespace, name string, rev events.DeploymentRevisionCreated, device string, t events.Type, reason string) {
	w.tb.Helper()
	d := events.NewWorkloadHealth(t, events.WorkloadHealth{Namespace: namespace, Deployment: name, UID: rev.UID, Generation: rev.Generation,
		RevisionID: rev.RevisionID, Reason: reason, Window: 300, Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Services: []events.ServiceHealth{{Name: name, State: "exited", Restarts: 3, ExitCode: 2, Logs: []string{"boom"}}}})
	w.append(events.Keys{Device: device}, d, rev.UID, rev.Generation)
}

func devices(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%05d", prefix, i))
	}
	return out
}

func benchRevision(name string, gen int64, targets, canaries []string) events.DeploymentRevisionCreated {
	return events.DeploymentRevisionCreated{UID: "uid-" + name, Generation: gen, RevisionID: fmt.Sprintf("%d-%s", gen, name),
		ScoreDigest: fmt.Sprintf("sha256:%s%d", name, gen),
		Score:       json.RawMessage(fmt.Sprintf(`{"type":"PodmanV0","data":{"services":[{"name":"%s","image":"registry.example.com/%s:v%d"}]}}`, name, name, gen)),
		Targets:     targets, Canaries: canaries}
}

// TestTheInPlaceFoldRendersWhatTheCopyingFoldRendered folds a 1,000-target
// Deployment's history, with every kind of report the projection counts or
// ignores, early reports, a chunked revision, a removed target and the
// deletion, and compares the JSON of the timeline with the one the copying
// fold (reference_fold_test.go) computes from the same records.
func TestTheInPlaceFoldRendersWhatTheCopyingFoldRendered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	w := streamWriter{tb: t, ctx: ctx, st: st}
	const ns, name = "lab", "web"
	targets1 := devices("edge", 0, 1000)
	canaries1 := targets1[:5]
	rev1 := benchRevision(name, 1, targets1, canaries1)
	w.revision(ns, name, rev1, 0)
	w.transition(ns, name, events.TypeRolloutStarted, rev1, nil, "", "")
	w.transition(ns, name, events.TypeRolloutCanaryStage, rev1, canaries1, "", "")
	// Devices outside the frozen set report the revision too.
	w.reports(ns, name, rev1, devices("stray", 0, 3), events.WorkloadApplying)
	w.reports(ns, name, rev1, canaries1, events.WorkloadApplying, canaries1[1])
	w.reports(ns, name, rev1, canaries1, events.WorkloadConverged)
	w.transition(ns, name, events.TypeRolloutCanariesConverged, rev1, nil, "", "")
	w.transition(ns, name, events.TypeRolloutReleased, rev1, nil, "", "")
	w.reports(ns, name, rev1, targets1, events.WorkloadApplying)
	w.reports(ns, name, rev1, targets1, events.WorkloadConverged, targets1[500], targets1[501])
	w.transition(ns, name, events.TypeRolloutFailed, rev1, nil, targets1[501], "image pull: manifest unknown")
	// Health reports: a crash loop that recovers, one a new revision
	// clears, a re-sent copy, a device outside the frozen set.
	w.health(ns, name, rev1, targets1[3], events.TypeWorkloadDegraded, events.HealthCrashLoop)
	w.health(ns, name, rev1, targets1[600], events.TypeWorkloadDegraded, events.HealthOOMKilled)
	w.health(ns, name, rev1, targets1[3], events.TypeWorkloadDegraded, events.HealthCrashLoop)
	w.health(ns, name, rev1, targets1[3], events.TypeWorkloadRecovered, events.HealthStable)
	w.health(ns, name, rev1, "stray-00001", events.TypeWorkloadDegraded, events.HealthDown)

	// Generation 2 drops the last 100 targets and adds 100; some devices
	// report it before its revision is stored, in target chunks.
	targets2 := append(devices("edge", 0, 900), devices("edge", 1000, 1100)...)
	rev2 := benchRevision(name, 2, targets2, targets2[:3])
	w.reports(ns, name, rev2, targets2[:20], events.WorkloadApplying)
	w.revision(ns, name, rev2, 2000)
	w.reports(ns, name, rev1, targets1[:10], events.WorkloadConverged) // older revision
	w.health(ns, name, rev1, targets1[4], events.TypeWorkloadDegraded, events.HealthCrashLoop)
	w.health(ns, name, rev2, targets2[1], events.TypeWorkloadDegraded, events.HealthUnhealthy)
	w.transition(ns, name, events.TypeRolloutStarted, rev2, nil, "", "")
	w.transition(ns, name, events.TypeRolloutCanaryStage, rev2, targets2[:3], "", "")
	w.reports(ns, name, rev2, targets2[:3], events.WorkloadConverged)
	w.transition(ns, name, events.TypeRolloutCanariesConverged, rev2, nil, "", "")
	w.transition(ns, name, events.TypeRolloutReleased, rev2, nil, "", "")
	w.transition(ns, name, events.TypeRolloutTargetRemoved, rev2, nil, targets2[7], "deleted")
	w.reports(ns, name, rev2, targets2, events.WorkloadApplying)
	w.reports(ns, name, rev2, targets2[:600], events.WorkloadConverged, targets2[42])
	// A third generation's reports come before it, then the Deployment is
	// deleted.
	rev3 := benchRevision(name, 3, targets2, nil)
	w.reports(ns, name, rev3, targets2[:5], events.WorkloadApplying)
	w.revision(ns, name, rev3, 0)
	w.health(ns, name, rev3, targets2[20], events.TypeWorkloadDegraded, events.HealthCrashLoop) // cleared by the deletion
	w.append(events.Keys{Namespace: ns, Name: name}, events.DeploymentDeleted{UID: rev3.UID, Generation: rev3.Generation}, rev3.UID, rev3.Generation)
	w.reports(ns, name, rev3, targets2[5:10], events.WorkloadConverged)

	h, err := New(Options{Reader: st})
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Deployment(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	want, err := h.referenceDeployment(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(want.Entries) < 3000 || len(want.Revisions) != 3 || want.State == nil {
		t.Fatalf("the reference timeline has %d entries and %d revisions: the scenario was not stored", len(want.Entries), len(want.Revisions))
	}
	// The scenario reaches every verdict on a report.
	ignored := map[string]int{}
	for _, e := range want.Entries {
		ignored[e.Ignored]++
	}
	if len(ignored) != 4 {
		t.Errorf("the reports' verdicts are %v, want counted, outside the frozen set, of an older revision and a health report of an older revision", ignored)
	}
	kinds := map[events.Type]int{}
	for _, e := range want.Entries {
		kinds[e.Type]++
	}
	if kinds[EntryHealthCleared] != 2 || kinds[events.TypeWorkloadRecovered] != 1 || kinds[events.TypeWorkloadDegraded] != 7 {
		t.Errorf("health entries %v: want 7 degraded, 1 recovered, 2 cleared (by revision 2, by the deletion)", kinds)
	}
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("the in-place fold's timeline differs from the copying fold's (-copying +in place):\n%s", cmp.Diff(want, got))
	}
}

// benchDeployment stores a Deployment whose revision freezes n targets,
// released to all, each of which reported twice (applying, converged).
func benchDeployment(b *testing.B, n int) *History {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	_, st := natstest.Provisioned(b)
	w := streamWriter{tb: b, ctx: ctx, st: st}
	targets := devices("edge", 0, n)
	rev := benchRevision("web", 1, targets, targets[:10])
	w.revision("bench", "web", rev, 0)
	w.transition("bench", "web", events.TypeRolloutStarted, rev, nil, "", "")
	w.transition("bench", "web", events.TypeRolloutCanaryStage, rev, targets[:10], "", "")
	w.transition("bench", "web", events.TypeRolloutCanariesConverged, rev, nil, "", "")
	w.transition("bench", "web", events.TypeRolloutReleased, rev, nil, "", "")
	w.reports("bench", "web", rev, targets, events.WorkloadApplying)
	w.reports("bench", "web", rev, targets, events.WorkloadConverged)
	h, err := New(Options{Reader: st})
	if err != nil {
		b.Fatal(err)
	}
	return h
}

// BenchmarkDeploymentTimeline is the Deployment timeline (the dashboard's
// Deployment page) of a revision with 1,000 and 10,000 targets that each
// reported twice, read from a real JetStream: the replay and the fold.
func BenchmarkDeploymentTimeline(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			h := benchDeployment(b, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				tl, err := h.Deployment(ctx, "bench", "web")
				if err != nil {
					b.Fatal(err)
				}
				if len(tl.Entries) != 2*n+5 || tl.State.Counts.Succeeded != n {
					b.Fatalf("%d entries, %+v", len(tl.Entries), tl.State.Counts)
				}
			}
		})
	}
}

// BenchmarkDeviceTimeline is one device's timeline on a stream with 200
// Deployments of two generations each, every revision freezing 500 of
// 1,000 devices and released to all; the device is a target of 20 of
// them and reported each of its revisions twice.
func BenchmarkDeviceTimeline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	_, st := natstest.Provisioned(b)
	w := streamWriter{tb: b, ctx: ctx, st: st}
	const device = "edge-00000"
	fleet := devices("edge", 0, 1000)
	revisions := 0
	for i := range 200 {
		name := fmt.Sprintf("app-%03d", i)
		targets := fleet[500:]
		if i%10 == 0 {
			targets = fleet[:500]
		}
		for gen := int64(1); gen <= 2; gen++ {
			rev := benchRevision(name, gen, targets, nil)
			w.revision("bench", name, rev, 0)
			w.transition("bench", name, events.TypeRolloutStarted, rev, nil, "", "")
			w.transition("bench", name, events.TypeRolloutReleased, rev, nil, "", "")
			if slices.Contains(targets, device) {
				revisions++
				w.reports("bench", name, rev, []string{device}, events.WorkloadApplying)
				w.reports("bench", name, rev, []string{device}, events.WorkloadConverged)
			}
		}
	}
	h, err := New(Options{Reader: st})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		tl, err := h.Device(ctx, device)
		if err != nil {
			b.Fatal(err)
		}
		if len(tl.Intent) != 20 || len(tl.Entries) < 4*revisions {
			b.Fatalf("%d intent entries, %d timeline entries", len(tl.Intent), len(tl.Entries))
		}
	}
}

// TestADeviceTimelineFoldsOnlyTheDeploymentsThatTargetItAndSaysTheSame
// compares a device's timeline with the one computed with every
// Deployment folded into the intent projection, on a stream where
// Deployments target the device, stop targeting it, never target it (one
// of them releasing it by name all the same), remove it, are deleted, and
// a TaskRun targets it.
func TestADeviceTimelineFoldsOnlyTheDeploymentsThatTargetItAndSaysTheSame(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	w := streamWriter{tb: t, ctx: ctx, st: st}
	const dev = "edge-00000"
	others := devices("edge", 1, 300)
	with := append([]string{dev}, others...)

	// a targets the device, then no longer does.
	a1 := benchRevision("a", 1, with, nil)
	w.revision("lab", "a", a1, 0)
	w.transition("lab", "a", events.TypeRolloutReleased, a1, nil, "", "")
	w.reports("lab", "a", a1, []string{dev}, events.WorkloadConverged)
	a2 := benchRevision("a", 2, others, nil)
	w.revision("lab", "a", a2, 0)
	w.transition("lab", "a", events.TypeRolloutReleased, a2, nil, "", "")
	// b never targets it, yet releases it by name, and is deleted.
	b1 := benchRevision("b", 1, others, nil)
	w.revision("lab", "b", b1, 0)
	w.transition("lab", "b", events.TypeRolloutCanaryStage, b1, []string{dev, others[0]}, "", "")
	w.transition("lab", "b", events.TypeRolloutReleased, b1, nil, "", "")
	w.reports("lab", "b", b1, []string{dev}, events.WorkloadFailed) // a stray report
	w.append(events.Keys{Namespace: "lab", Name: "b"}, events.DeploymentDeleted{UID: b1.UID, Generation: 1}, b1.UID, 1)
	// c releases it as a canary, then a chunked generation removes it
	// before the release to all, and c is deleted.
	c1 := benchRevision("c", 1, with, []string{dev})
	w.revision("lab", "c", c1, 0)
	w.transition("lab", "c", events.TypeRolloutCanaryStage, c1, []string{dev}, "", "")
	w.reports("lab", "c", c1, []string{dev}, events.WorkloadApplying)
	c2 := benchRevision("c", 2, with, []string{dev})
	w.revision("lab", "c", c2, 1000)
	w.transition("lab", "c", events.TypeRolloutTargetRemoved, c2, nil, dev, "quarantined")
	w.transition("lab", "c", events.TypeRolloutReleased, c2, nil, "", "")
	w.append(events.Keys{Namespace: "lab", Name: "c"}, events.DeploymentDeleted{UID: c2.UID, Generation: 2}, c2.UID, 2)
	// d targets it and stays; a TaskRun targets it.
	d1 := benchRevision("d", 1, with, nil)
	w.revision("lab", "d", d1, 0)
	w.transition("lab", "d", events.TypeRolloutReleased, d1, nil, "", "")
	w.append(events.Keys{Namespace: "lab", Name: "upgrade"}, events.TaskRunCreated{UID: "t1", Generation: 1, Task: events.TaskSystemUpgrade, Targets: with}, "t1", 1)

	h, err := New(Options{Reader: st})
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.Device(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	want, err := h.referenceDevice(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	changes := 0
	for _, e := range want.Entries {
		if e.Type == EntryIntentChanged {
			changes++
		}
	}
	if changes < 5 || len(want.Intent) != 1 || len(want.Tasks) != 1 {
		t.Fatalf("the reference timeline has %d intent changes, intent %+v, tasks %+v: the scenario was not stored", changes, want.Intent, want.Tasks)
	}
	gotJSON, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("the device timeline differs from the one folding every Deployment (-every +targeting):\n%s", cmp.Diff(want, got))
	}
}
