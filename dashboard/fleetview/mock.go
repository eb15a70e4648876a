package fleetview

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/score"
)

// Mock returns a View of generated data for serve-web --mock: devices
// devices with realistic names, labels and inventory, mixed liveness (mostly
// online, some stale, some offline, a few never seen, two quarantined), four
// Deployments (one succeeded with two devices crash-looping since, so
// Degraded, one rolling out past its canaries with failures, one whose
// canary failed, one waiting on its canaries past its progress deadline),
// every device's containers, two
// TaskRuns (one running, one finished with a failure), a 24-hour trend and
// per-device timelines. Times are relative to the call, and the clock is
// the real one; the same seed gives the same fleet relative to that
// instant. It proves only the web surface: nothing reads a Fleet. Run
// publishes a change of the overview and the trend every few seconds, so
// live updates can be seen.
func Mock(seed int64, devices int) *View {
	return mockAt(seed, devices, time.Now().UTC().Truncate(time.Second), time.Now)
}

// mockAt is Mock with the instant the fleet is generated at and a clock.
func mockAt(seed int64, devices int, at time.Time, now func() time.Time) *View {
	g := generate(seed, max(devices, 0), at)
	v := &View{o: Options{Now: now}.withDefaults(), objs: g, hist: g, trend: g.trend, hub: newHub()}
	v.run = func(ctx context.Context) error {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				v.hub.publish(PageRef{Kind: PageOverview}, PageRef{Kind: PageTrend})
			}
		}
	}
	return v
}

// mockFleet is generated objects and the timelines that go with them.
type mockFleet struct {
	devs     []fleetv1.Device
	deps     []fleetv1.Deployment
	trs      []fleetv1.TaskRun
	timeline map[string]*history.DeploymentTimeline // namespace/name
	tasks    map[string]*history.TaskRunTimeline
	// results[device] are the device's workload results per Deployment.
	results map[string][]history.Report
	// degraded[device][namespace/name] is the health reason of a
	// Deployment the device reports Degraded.
	degraded map[string]map[string]string
	trend    *trendCounter
}

func (m *mockFleet) devices(context.Context) ([]fleetv1.Device, error) {
	return slices.Clone(m.devs), nil
}
func (m *mockFleet) deployments(context.Context) ([]fleetv1.Deployment, error) {
	return slices.Clone(m.deps), nil
}
func (m *mockFleet) taskRuns(context.Context) ([]fleetv1.TaskRun, error) {
	return slices.Clone(m.trs), nil
}

var (
	mockSites = []struct{ site, region string }{{"paris", "eu-west"}, {"lyon", "eu-west"}, {"berlin", "eu-central"}, {"montreal", "ca-east"},
		{"toronto", "ca-east"}, {"quebec", "ca-east"}, {"vancouver", "ca-west"}, {"madrid", "eu-south"}}
	mockHardware = []struct{ hw, arch, kernel string }{{"rpi4", "arm64", "6.1.0-rpi7-rpi-v8"}, {"nuc12", "amd64", "6.1.0-28-amd64"},
		{"jetson-orin", "arm64", "5.15.136-tegra"}, {"ipc-610", "amd64", "6.1.0-28-amd64"}}
	mockAgents = []string{"v0.12.1", "v0.12.1", "v0.12.1", "v0.11.4"}
)

// generate builds the mock fleet.
func generate(seed int64, n int, now time.Time) *mockFleet {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	m := &mockFleet{timeline: map[string]*history.DeploymentTimeline{}, tasks: map[string]*history.TaskRunTimeline{},
		results: map[string][]history.Report{}, degraded: map[string]map[string]string{}, trend: newTrendCounter()}
	for i := range n {
		s := mockSites[r.IntN(len(mockSites))]
		hw := mockHardware[r.IntN(len(mockHardware))]
		d := fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%04d", s.site, hw.hw, i), Namespace: "fleet",
			UID: types.UID(fmt.Sprintf("dev-%d-%d", seed, i)), CreationTimestamp: metav1.NewTime(now.Add(-time.Duration(30+r.IntN(300)) * 24 * time.Hour)),
			Labels: map[string]string{"site": s.site, "region": s.region, "hardware": hw.hw, "tier": []string{"edge", "edge", "edge", "core"}[r.IntN(4)]}},
			Spec: fleetv1.DeviceSpec{IdentitySubject: fmt.Sprintf("device:%s-%04d", s.site, i)}}
		if r.IntN(25) == 0 {
			d.Labels[fleetv1.LabelCanary] = "true"
		}
		if i == 7 || i == 311 {
			d.Labels[fleetv1.LabelBlacklist] = "true"
		}
		var hb time.Time
		switch p := r.IntN(100); {
		case p < 84:
			d.Status.Liveness, hb = fleetv1.LivenessOnline, now.Add(-time.Duration(r.IntN(60))*time.Second)
		case p < 92:
			d.Status.Liveness, hb = fleetv1.LivenessStale, now.Add(-time.Duration(2+r.IntN(50))*time.Minute)
		case p < 98:
			d.Status.Liveness, hb = fleetv1.LivenessStale, now.Add(-time.Duration(2+r.IntN(70))*time.Hour)
		default:
			d.Status.Liveness = fleetv1.LivenessUnknown
		}
		if !hb.IsZero() {
			t := metav1.NewTime(hb)
			d.Status.LastHeartbeat = &t
			d.Status.Inventory = &fleetv1.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: hw.arch, Kernel: hw.kernel,
				AgentVersion: mockAgents[r.IntN(len(mockAgents))]}
		}
		m.devs = append(m.devs, d)
	}
	type scenario struct {
		name, ns, image string
		selector        map[string]string
		canary          bool
		// fail is the chance in 1000 a target failed; pending the chance a
		// target has not converged yet; released says whether the rollout
		// went past its canaries.
		fail, pending int
		released      bool
		generation    int64
	}
	scenarios := []scenario{
		{"telemetry-collector", "fleet", "registry.nationtech.io/telemetry-collector:2.4.1", map[string]string{}, false, 0, 0, true, 3},
		{"video-analytics", "fleet", "registry.nationtech.io/video-analytics:1.9.0", map[string]string{"tier": "edge"}, true, 8, 300, true, 7},
		{"pos-gateway", "retail", "registry.nationtech.io/pos-gateway:5.0.0-rc2", map[string]string{"region": "ca-east"}, true, 0, 0, false, 2},
		{"mqtt-broker", "fleet", "docker.io/library/eclipse-mosquitto:2.0.20", map[string]string{"hardware": "nuc12"}, true, 0, 600, false, 1},
	}
	for si, sc := range scenarios {
		uid := types.UID(fmt.Sprintf("dep-%d-%d", seed, si))
		d := fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: sc.name, Namespace: sc.ns, UID: uid, Generation: sc.generation,
			CreationTimestamp: metav1.NewTime(now.Add(-time.Duration(10+si*3) * 24 * time.Hour))},
			Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: sc.selector},
				Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: sc.name, Image: sc.image}}}}}}
		tl := &history.DeploymentTimeline{Namespace: sc.ns, Name: sc.name, Entries: []history.Entry{}}
		var current history.Revision
		for g := int64(1); g <= sc.generation; g++ {
			created := now.Add(-time.Duration(sc.generation-g+1) * 20 * time.Hour)
			if g == sc.generation {
				created = now.Add(-time.Duration(40+si*13) * time.Minute)
			}
			rev := history.Revision{UID: string(uid), Generation: g, RevisionID: mockID("rev", sc.name, g), ScoreDigest: mockID("score", sc.name, g),
				Created: created, ID: mockID("ev", sc.name, g), Targets: []string{}, Canaries: []string{}, Results: []history.DeviceResult{}}
			tl.Entries = append(tl.Entries, history.Entry{Time: created, EventTime: created, ID: rev.ID, Type: events.TypeDeploymentRevisionCreated,
				Stream: events.StreamIntent, Deployment: sc.ns + "/" + sc.name, Generation: g, RevisionID: rev.RevisionID,
				Summary: fmt.Sprintf("revision %d created", g), Data: json.RawMessage(`{}`)})
			if g < sc.generation {
				tl.Revisions = append(tl.Revisions, rev)
				continue
			}
			current = rev
		}
		sel := labels.SelectorFromSet(sc.selector)
		var counts events.RolloutCounts
		var latest *history.Failure
		for i := range m.devs {
			dev := &m.devs[i]
			if _, q := dev.Labels[fleetv1.LabelBlacklist]; q || !sel.Matches(labels.Set(dev.Labels)) {
				continue
			}
			if dev.Status.LastHeartbeat == nil && si == 0 {
				// Enrolled after the revision's targets were frozen.
				continue
			}
			canary := sc.canary && dev.Labels[fleetv1.LabelCanary] == "true"
			current.Targets = append(current.Targets, dev.Name)
			if canary {
				current.Canaries = append(current.Canaries, dev.Name)
			}
			res := history.DeviceResult{Device: dev.Name, Canary: canary}
			handed := sc.released || canary || !sc.canary
			offline := dev.Status.LastHeartbeat == nil
			switch p := r.IntN(1000); {
			case !handed || offline:
			case sc.name == "pos-gateway" && canary && p < 500:
				res.Phase, res.Error = events.WorkloadFailed, "podman: pulling registry.nationtech.io/pos-gateway:5.0.0-rc2: manifest unknown"
			case p < sc.fail:
				res.Phase, res.Error = events.WorkloadFailed, "container pos exited with code 137 (out of memory) 3 times within 5m"
			case p < sc.fail+sc.pending:
				res.Phase = []events.WorkloadPhase{events.WorkloadPending, events.WorkloadApplying}[r.IntN(2)]
			default:
				res.Phase = events.WorkloadConverged
			}
			if res.Phase != "" {
				res.Since = current.Created.Add(time.Duration(1+r.IntN(30)) * time.Minute)
				res.Reports = 1 + r.IntN(3)
				res.ReportID = mockID("report", dev.Name, current.Generation)
				m.results[dev.Name] = append(m.results[dev.Name], history.Report{Namespace: sc.ns, Deployment: sc.name, UID: string(uid),
					Generation: current.Generation, RevisionID: current.RevisionID, Phase: res.Phase, Error: res.Error, Since: res.Since,
					Stored: res.Since, ID: res.ReportID})
				m.trend.report(res.Since, res.Phase == events.WorkloadFailed)
			}
			counts.Total++
			if canary {
				counts.Canaries++
			}
			switch targetStateOf(res.Phase) {
			case TargetSucceeded:
				counts.Succeeded++
				if canary {
					counts.CanariesSucceeded++
				}
			case TargetFailed:
				counts.Failed++
				if canary {
					counts.CanariesFailed++
				}
				if latest == nil || res.Since.After(latest.Time) {
					latest = &history.Failure{Device: dev.Name, Error: res.Error, Time: res.Since}
				}
			default:
				counts.Pending++
			}
			current.Results = append(current.Results, res)
		}
		tl.Revisions = append(tl.Revisions, current)
		stage, phase := projections.StageSucceeded, fleetv1.PhaseSucceeded
		switch {
		case sc.name == "pos-gateway":
			stage, phase = projections.StageFailed, fleetv1.PhaseFailed
		case counts.Pending > 0 && !sc.released:
			stage, phase = projections.StageCanary, fleetv1.PhaseCanary
		case counts.Pending > 0:
			stage, phase = projections.StageReleased, fleetv1.PhaseProgressing
		case counts.Failed > 0:
			stage, phase = projections.StageFailed, fleetv1.PhaseFailed
		}
		stageAt := current.Created.Add(12 * time.Minute)
		for _, t := range mockTransitions(stage, sc.canary) {
			tl.Entries = append(tl.Entries, history.Entry{Time: stageAt, EventTime: stageAt, ID: mockID("tr", sc.name, int64(len(tl.Entries))), Type: t.typ,
				Stream: events.StreamRollout, Deployment: sc.ns + "/" + sc.name, Generation: current.Generation, RevisionID: current.RevisionID,
				Summary: t.summary, Stage: t.stage, Data: json.RawMessage(`{}`)})
		}
		state := &history.RolloutState{Namespace: sc.ns, Name: sc.name, UID: string(uid), Generation: current.Generation, RevisionID: current.RevisionID,
			Stage: stage, Phase: string(phase), Since: stageAt, Counts: counts, Targets: current.Targets, Canaries: current.Canaries, LatestFailure: latest}
		tl.State = state
		m.timeline[sc.ns+"/"+sc.name] = tl
		d.Status = fleetv1.DeploymentStatus{ObservedGeneration: sc.generation, Phase: phase,
			Revision: &fleetv1.RevisionRef{UID: string(uid), Generation: current.Generation, ID: current.RevisionID},
			Counts: fleetv1.RolloutCounts{Total: int32(counts.Total), Succeeded: int32(counts.Succeeded), Pending: int32(counts.Pending),
				Failed: int32(counts.Failed), Canaries: int32(counts.Canaries), CanariesSucceeded: int32(counts.CanariesSucceeded),
				CanariesFailed: int32(counts.CanariesFailed)}}
		if latest != nil {
			d.Status.LatestFailure = &fleetv1.DeviceFailure{Device: latest.Device, Error: latest.Error, Time: metav1.NewTime(latest.Time)}
		}
		if phase == fleetv1.PhaseProgressing {
			// A rollout in batches, its second one waiting for approval:
			// the first holds every non-canary result and a few pending.
			d.Status.Plan = &fleetv1.PlanStatus{Batch: 1, Batches: 3, AwaitingApproval: 2}
			conv, failed := counts.Succeeded-counts.CanariesSucceeded, counts.Failed-counts.CanariesFailed
			pending := counts.Total - counts.Canaries - conv - failed
			first := conv + failed + min(pending, 3)
			rest := counts.Total - counts.Canaries - first
			state.Stage = projections.StageBatches
			state.Batches = []history.BatchProgress{
				{Size: first, Converged: conv, Failures: failed, SuccessPercent: 90, Started: true, Approved: true, ApprovedBy: "mock-admin"},
				{Size: rest / 2, SuccessPercent: 90}, {Size: rest - rest/2, SuccessPercent: 100}}
		}
		reason := map[fleetv1.DeploymentPhase]string{fleetv1.PhaseSucceeded: fleetv1.ReasonRolloutSucceeded, fleetv1.PhaseFailed: fleetv1.ReasonRolloutFailed,
			fleetv1.PhaseCanary: fleetv1.ReasonRolloutInProgress, fleetv1.PhaseProgressing: fleetv1.ReasonRolloutInProgress}[phase]
		if sc.name == "pos-gateway" {
			reason = fleetv1.ReasonCanaryFailed
		}
		status := metav1.ConditionFalse
		if phase == fleetv1.PhaseSucceeded {
			status = metav1.ConditionTrue
		}
		d.Status.Conditions = []metav1.Condition{{Type: fleetv1.ConditionReady, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(stageAt),
			Message: fmt.Sprintf("%d of %d targets succeeded, %d failed", counts.Succeeded, counts.Total, counts.Failed)}}
		if sc.name == "mqtt-broker" && phase == fleetv1.PhaseCanary {
			// A canary stage past its progress deadline: a canary retries
			// a pull that cannot succeed.
			d.Status.Conditions[0].Message += "; progress deadline exceeded"
			d.Status.Conditions = append(d.Status.Conditions, metav1.Condition{Type: fleetv1.ConditionProgressing, Status: metav1.ConditionFalse,
				ObservedGeneration: sc.generation, Reason: fleetv1.ReasonProgressDeadlineExceeded, LastTransitionTime: metav1.NewTime(stageAt.Add(10 * time.Minute)),
				Message: fmt.Sprintf("revision %s: no progress within the progress deadline (10m0s) since %s: no transition, and no target's first report or first result (Converged or Failed); "+
					"%d waiting: a canary Pending: registry unavailable, retrying: image docker.io/library/eclipse-mosquitto:2.0.20 could not be pulled", current.RevisionID,
					stageAt.Format(time.RFC3339), counts.Pending)})
		}
		if si == 0 {
			m.degrade(&d, tl, mockDegraded)
		} else {
			m.degrade(&d, tl, 0)
		}
		m.deps = append(m.deps, d)
	}
	m.generateTaskRuns(r, seed, now)
	// What each device runs, as the operator mirrors the devices' container
	// reports into status.workloads.
	for i := range m.devs {
		d := &m.devs[i]
		for _, rep := range m.results[d.Name] {
			if rep.Phase != events.WorkloadConverged {
				continue
			}
			d.Status.Workloads = append(d.Status.Workloads, fleetv1.DeviceWorkload{Namespace: rep.Namespace, Deployment: rep.Deployment,
				Revision: rep.RevisionID, Degraded: m.degraded[d.Name][rep.Namespace+"/"+rep.Deployment]})
		}
	}
	// Heartbeats: one per online device every 30s over the last 3 hours
	// (the "live" part), fewer before (as the telemetry stream holds).
	online := 0
	for i := range m.devs {
		if m.devs[i].Status.Liveness == fleetv1.LivenessOnline {
			online++
		}
	}
	for h := range TrendHours {
		start := now.Truncate(time.Hour).Add(-time.Duration(h) * time.Hour)
		per := online * 5
		if h < 3 {
			per = online * 120
		}
		m.trend.mu.Lock()
		m.trend.heartbeats[hourOf(start)] = per
		m.trend.mu.Unlock()
		for range r.IntN(n/10 + 1) {
			m.trend.report(start.Add(time.Duration(r.IntN(3600))*time.Second), r.IntN(40) == 0)
		}
	}
	m.trend.startLive(now.Truncate(time.Hour).Add(-2 * time.Hour))
	return m
}

// mockTransitions lists the rollout transitions that lead to a stage.
func mockTransitions(stage projections.Stage, canary bool) []struct {
	typ     events.Type
	stage   projections.Stage
	summary string
} {
	type tr = struct {
		typ     events.Type
		stage   projections.Stage
		summary string
	}
	out := []tr{{events.TypeRolloutStarted, projections.StageStarted, "rollout started"}}
	if canary {
		out = append(out, tr{events.TypeRolloutCanaryStage, projections.StageCanary, "released to the canaries"})
		if stage == projections.StageCanary {
			return out
		}
		if stage == projections.StageFailed {
			return append(out, tr{events.TypeRolloutCanaryFailed, projections.StageFailed, "a canary failed: release blocked"})
		}
		out = append(out, tr{events.TypeRolloutCanariesConverged, projections.StageCanariesConverged, "every canary converged"})
	}
	out = append(out, tr{events.TypeRolloutReleased, projections.StageReleased, "released to every target"})
	switch stage {
	case projections.StageSucceeded:
		out = append(out, tr{events.TypeRolloutSucceeded, projections.StageSucceeded, "every target converged"})
	case projections.StageFailed:
		out = append(out, tr{events.TypeRolloutFailed, projections.StageFailed, "a target failed"})
	}
	return out
}

// generateTaskRuns adds a running system upgrade and a finished agent
// upgrade with a failure.
func (m *mockFleet) generateTaskRuns(r *rand.Rand, seed int64, now time.Time) {
	for ti, tc := range []struct {
		name     string
		task     fleetv1.TaskName
		selector map[string]string
		done     bool
	}{
		{"bookworm-security", fleetv1.TaskSystemUpgrade, map[string]string{"region": "eu-west"}, false},
		{"agent-v0-12-1", fleetv1.TaskAgentUpgrade, map[string]string{"hardware": "rpi4"}, true},
	} {
		t := fleetv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: "fleet", UID: types.UID(fmt.Sprintf("tr-%d-%d", seed, ti)),
			CreationTimestamp: metav1.NewTime(now.Add(-time.Duration(2+ti*30) * time.Hour))},
			Spec: fleetv1.TaskRunSpec{Task: tc.task, TargetSelector: fleetv1.TargetSelector{MatchLabels: tc.selector}}}
		if tc.task == fleetv1.TaskAgentUpgrade {
			t.Spec.Agent = &fleetv1.AgentArtifact{URL: "https://downloads.nationtech.io/fleet-agent/v0.12.1/fleet-agent-linux-arm64",
				SHA256: mockID("sha", tc.name, 0), Version: "v0.12.1"}
		} else {
			t.Spec.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "3h"}
		}
		sel := labels.SelectorFromSet(tc.selector)
		tl := &history.TaskRunTimeline{Namespace: t.Namespace, Name: t.Name, UID: string(t.UID), Task: string(tc.task), Created: t.CreationTimestamp.UTC(),
			Targets: []string{}, Results: []fleetv1.TaskDeviceResult{}, Entries: []history.Entry{}}
		var c fleetv1.TaskRunCounts
		for i := range m.devs {
			d := &m.devs[i]
			if _, q := d.Labels[fleetv1.LabelBlacklist]; q || !sel.Matches(labels.Set(d.Labels)) {
				continue
			}
			tl.Targets = append(tl.Targets, d.Name)
			c.Targets++
			since := metav1.NewTime(t.CreationTimestamp.Add(time.Duration(1+r.IntN(90)) * time.Minute))
			res := fleetv1.TaskDeviceResult{Device: d.Name, Since: &since}
			switch p := r.IntN(100); {
			case d.Status.LastHeartbeat == nil || (!tc.done && p < 40):
				res.Phase, res.Since = events.TaskPending, nil
				c.Pending++
			case !tc.done && p < 55:
				res.Phase = events.TaskRunning
				c.Running++
			case p < 97:
				res.Phase = events.TaskSucceeded
				if tc.task == fleetv1.TaskAgentUpgrade {
					res.AgentVersion = "v0.12.1"
				} else {
					res.ChangedPackages = int32(3 + r.IntN(40))
				}
				c.Succeeded++
			default:
				res.Phase = events.TaskFailed
				res.Message = "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (unattended-upgr)"
				if tc.task == fleetv1.TaskAgentUpgrade {
					res.Message, res.AgentVersion = "new agent did not report v0.12.1 within 2m: restored v0.11.4", "v0.11.4"
				}
				c.Failed++
				t.Status.LatestFailure = &fleetv1.TaskFailure{Device: d.Name, Message: res.Message, Time: since}
			}
			tl.Results = append(tl.Results, res)
		}
		t.Status.Counts = c
		t.Status.Phase = fleetv1.TaskRunRunning
		if tc.done {
			t.Status.Phase = fleetv1.TaskRunSucceeded
			if c.Failed > 0 {
				t.Status.Phase = fleetv1.TaskRunFailed
			}
		}
		t.Status.Results = tl.Results[:min(len(tl.Results), fleetv1.MaxTaskRunResults)]
		tl.Status = t.Status.DeepCopy()
		tl.Entries = append(tl.Entries, history.Entry{Time: tl.Created, EventTime: tl.Created, ID: mockID("ev", tc.name, 0), Type: events.TypeTaskRunCreated,
			Stream: events.StreamIntent, Summary: fmt.Sprintf("TaskRun created: %s for %d targets", tc.task, len(tl.Targets)), Data: json.RawMessage(`{}`)})
		m.tasks[t.Namespace+"/"+t.Name] = tl
		m.trs = append(m.trs, t)
	}
}

// mockID is a deterministic id.
func mockID(kind, name string, n int64) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%s/%d", kind, name, n))
	return hex.EncodeToString(h[:13])
}

// Deployment implements historian.
func (m *mockFleet) Deployment(_ context.Context, namespace, name string) (*history.DeploymentTimeline, error) {
	if tl, ok := m.timeline[namespace+"/"+name]; ok {
		return tl, nil
	}
	return nil, fmt.Errorf("Deployment %s/%s: %w", namespace, name, history.ErrNoEvents)
}

// Device implements historian: the device's intent is the current revision
// of every Deployment it is a target of.
func (m *mockFleet) Device(_ context.Context, device string) (*history.DeviceTimeline, error) {
	tl := &history.DeviceTimeline{Device: device, Entries: []history.Entry{}, Intent: []events.IntentEntry{}}
	for _, dep := range m.deps {
		dt := m.timeline[dep.Namespace+"/"+dep.Name]
		cur := dt.Revisions[len(dt.Revisions)-1]
		if slices.Contains(cur.Targets, device) {
			tl.Intent = append(tl.Intent, events.IntentEntry{Namespace: dep.Namespace, Name: dep.Name, UID: cur.UID, Generation: cur.Generation,
				RevisionID: cur.RevisionID, ScoreDigest: cur.ScoreDigest})
			tl.Entries = append(tl.Entries, history.Entry{Time: cur.Created, Type: history.EntryIntentChanged, Stream: events.StreamIntent,
				Device: device, Deployment: dep.Namespace + "/" + dep.Name, Generation: cur.Generation,
				Summary: fmt.Sprintf("desired: %s/%s generation %d", dep.Namespace, dep.Name, cur.Generation), Data: json.RawMessage(`{}`)})
		}
	}
	for _, rep := range m.results[device] {
		data, err := json.Marshal(events.WorkloadStatus{Namespace: rep.Namespace, Deployment: rep.Deployment, UID: rep.UID, Generation: rep.Generation,
			RevisionID: rep.RevisionID, Phase: rep.Phase, Error: rep.Error, Since: rep.Since})
		if err != nil {
			return nil, err
		}
		tl.Entries = append(tl.Entries, history.Entry{Time: rep.Stored, EventTime: rep.Since, ID: rep.ID, Type: events.TypeWorkloadStatus,
			Stream: events.StreamReports, Device: device, Deployment: rep.Namespace + "/" + rep.Deployment, Generation: rep.Generation,
			Summary: fmt.Sprintf("%s/%s generation %d: %s %s", rep.Namespace, rep.Deployment, rep.Generation, rep.Phase, rep.Error), Data: data})
	}
	for _, dep := range m.deps {
		for _, e := range m.timeline[dep.Namespace+"/"+dep.Name].Entries {
			if e.Device == device && e.Type == events.TypeWorkloadDegraded {
				e.Summary = fmt.Sprintf("%s generation %d %s", e.Deployment, e.Generation, e.Summary[len(device)+1:])
				tl.Entries = append(tl.Entries, e)
			}
		}
	}
	slices.SortStableFunc(tl.Entries, func(a, b history.Entry) int { return a.Time.Compare(b.Time) })
	if len(tl.Entries) == 0 {
		return nil, fmt.Errorf("device %s: %w", device, history.ErrNoEvents)
	}
	tl.Containers = m.containersOf(device)
	return tl, nil
}

// TaskRun implements historian.
func (m *mockFleet) TaskRun(_ context.Context, namespace, name string) (*history.TaskRunTimeline, error) {
	if tl, ok := m.tasks[namespace+"/"+name]; ok {
		return tl, nil
	}
	return nil, fmt.Errorf("TaskRun %s/%s: %w", namespace, name, history.ErrNoEvents)
}

// FleetAt implements historian: the mock has one state, the current one,
// whatever the time asked (its revisions' creation times are shown, nothing
// earlier is generated).
func (m *mockFleet) FleetAt(_ context.Context, t time.Time) (*history.FleetState, error) {
	fs := &history.FleetState{At: t.UTC(), Positions: map[string]uint64{}, Devices: []history.DeviceState{}, Deployments: []history.RolloutState{}}
	for _, dep := range m.deps {
		fs.Deployments = append(fs.Deployments, *m.timeline[dep.Namespace+"/"+dep.Name].State)
	}
	for _, d := range m.devs {
		if reps := m.results[d.Name]; len(reps) > 0 {
			fs.Devices = append(fs.Devices, history.DeviceState{Device: d.Name, Desired: []events.IntentEntry{}, Reported: reps})
		}
	}
	return fs, nil
}
