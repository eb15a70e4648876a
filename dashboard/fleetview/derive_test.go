package fleetview

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

var testNow = time.Date(2026, 5, 1, 12, 30, 0, 0, time.UTC)

func device(name string, liveness fleetv1.Liveness, hbAgo time.Duration, labels map[string]string) fleetv1.Device {
	d := fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "fleet", Labels: labels}}
	d.Status.Liveness = liveness
	if hbAgo >= 0 {
		t := metav1.NewTime(testNow.Add(-hbAgo))
		d.Status.LastHeartbeat = &t
	}
	return d
}

func TestParseDeviceQuery(t *testing.T) {
	tests := []struct {
		name  string
		q     DeviceQuery
		field string // "" when valid
	}{
		{"the zero query is every device, first page", DeviceQuery{}, ""},
		{"a selector with set-based terms is valid", DeviceQuery{Selector: "site in (paris,lyon),tier!=core,!blacklist"}, ""},
		{"a selector that does not parse is refused naming the selector", DeviceQuery{Selector: "site=(paris"}, "selector"},
		{"a selector with an invalid key is refused naming the selector", DeviceQuery{Selector: "-bad-=x"}, "selector"},
		{"an unknown liveness is refused naming liveness", DeviceQuery{Liveness: "asleep"}, "liveness"},
		{"a search longer than the bound is refused naming search", DeviceQuery{Search: strings.Repeat("x", MaxSearch+1)}, "search"},
		{"a negative offset is refused naming offset", DeviceQuery{Offset: -1}, "offset"},
		{"a limit over the maximum is refused naming limit", DeviceQuery{Limit: MaxPageSize + 1}, "limit"},
		{"a negative limit is refused naming limit", DeviceQuery{Limit: -5}, "limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseDeviceQuery(tc.q)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if f.limit <= 0 {
					t.Errorf("limit %d after defaults", f.limit)
				}
				return
			}
			if !errors.Is(err, ErrInvalidQuery) {
				t.Fatalf("error %v, want ErrInvalidQuery", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Errorf("error %q does not name the field %q", err, tc.field)
			}
		})
	}
}

func TestPageDevices(t *testing.T) {
	devs := []fleetv1.Device{
		device("paris-3", fleetv1.LivenessOnline, time.Second, map[string]string{"site": "paris", "tier": "edge"}),
		device("paris-1", fleetv1.LivenessStale, 10*time.Minute, map[string]string{"site": "paris", "tier": "core"}),
		device("lyon-1", fleetv1.LivenessStale, 5*time.Hour, map[string]string{"site": "lyon"}),
		device("lyon-2", fleetv1.LivenessUnknown, -1, map[string]string{"site": "lyon"}),
		device("paris-2", fleetv1.LivenessOnline, time.Second, map[string]string{"site": "paris", "tier": "edge"}),
	}
	devs[0].Status.Inventory = &fleetv1.DeviceInventory{Kernel: "6.1.0-RPI"}
	tests := []struct {
		name    string
		q       DeviceQuery
		want    []string
		matched int
	}{
		{"every device sorted by id", DeviceQuery{}, []string{"lyon-1", "lyon-2", "paris-1", "paris-2", "paris-3"}, 5},
		{"a label selector keeps the matching devices", DeviceQuery{Selector: "site=paris,tier=edge"}, []string{"paris-2", "paris-3"}, 2},
		{"a set selector keeps the matching devices", DeviceQuery{Selector: "tier in (core)"}, []string{"paris-1"}, 1},
		{"stale is a recent missed heartbeat", DeviceQuery{Liveness: LivenessStale}, []string{"paris-1"}, 1},
		{"offline is an old heartbeat or none", DeviceQuery{Liveness: LivenessOffline}, []string{"lyon-1", "lyon-2"}, 2},
		{"search matches inventory case-insensitively", DeviceQuery{Search: "rpi"}, []string{"paris-3"}, 1},
		{"search matches a label value", DeviceQuery{Search: "LYON"}, []string{"lyon-1", "lyon-2"}, 2},
		{"a page is a window of the sorted matches", DeviceQuery{Offset: 1, Limit: 2}, []string{"lyon-2", "paris-1"}, 5},
		{"a page past the end is empty", DeviceQuery{Offset: 10}, []string{}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parseDeviceQuery(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			p := pageDevices(devs, f, testNow, time.Hour)
			got := []string{}
			for _, r := range p.Items {
				got = append(got, r.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			if p.Matched != tc.matched || p.Total != len(devs) {
				t.Errorf("matched %d of %d, want %d of %d", p.Matched, p.Total, tc.matched, len(devs))
			}
		})
	}
}

func TestTheDeviceListSaysWhatEachDeviceRuns(t *testing.T) {
	d := device("runner", fleetv1.LivenessOnline, time.Second, nil)
	for i := range MaxRunsShown + 2 {
		d.Status.Workloads = append(d.Status.Workloads, fleetv1.DeviceWorkload{Namespace: "apps", Deployment: fmt.Sprintf("web-%d", i), Revision: "r1"})
	}
	d.Status.Workloads[1].Degraded = "CrashLoop"
	d.Status.Workloads[2].Deployment = "x\x1b[31m\n" + strings.Repeat("é", 1000)
	r := deviceRow(&d, testNow, time.Hour)
	if len(r.Runs) != MaxRunsShown || r.RunsMore != 2 {
		t.Fatalf("%d shown and %d more, want %d and 2", len(r.Runs), r.RunsMore, MaxRunsShown)
	}
	if diff := cmp.Diff(Running{Namespace: "apps", Deployment: "web-1", Revision: "r1", Degraded: "CrashLoop"}, r.Runs[1]); diff != "" {
		t.Errorf("a degraded Deployment (-want +got):\n%s", diff)
	}
	if s := r.Runs[2].Deployment; strings.ContainsAny(s, "\x1b\n") || len(s) > MaxFieldLength+len("…")+utf8.UTFMax {
		t.Errorf("the device's text is shown as %q", s)
	}
}

func TestHostileDeviceDataIsBounded(t *testing.T) {
	labels := map[string]string{}
	for i := range MaxLabels + 10 {
		labels[fmt.Sprintf("k%03d", i)] = strings.Repeat("v", 63)
	}
	d := device("odd", fleetv1.LivenessOnline, time.Second, labels)
	d.Status.Inventory = &fleetv1.DeviceInventory{OS: "Debian\x00\x1b[31m\xff\xfe", Kernel: strings.Repeat("é", 10000), AgentVersion: "v1\nforged: line"}
	r := deviceRow(&d, testNow, time.Hour)
	if len(r.Labels) != MaxLabels || !r.LabelsTruncated {
		t.Errorf("%d labels shown (truncated %v), want %d and truncated", len(r.Labels), r.LabelsTruncated, MaxLabels)
	}
	for _, s := range []string{r.Inventory.OS, r.Inventory.Kernel, r.Inventory.AgentVersion} {
		if !utf8.ValidString(s) {
			t.Errorf("%q is not valid UTF-8", s)
		}
		if len(s) > MaxFieldLength+len("…")+utf8.UTFMax {
			t.Errorf("a field of %d bytes is shown, bound %d", len(s), MaxFieldLength)
		}
		if strings.ContainsAny(s, "\x00\x1b\n") {
			t.Errorf("%q keeps a control character", s)
		}
	}
}

func TestClean(t *testing.T) {
	tests := []struct {
		name, in, want string
		max            int
	}{
		{"plain text is kept", "Debian 12", "Debian 12", 20},
		{"bytes that are not UTF-8 are replaced", "a\xffb", "a\uFFFDb", 20},
		{"control characters are replaced", "a\nb\x00", "a\uFFFDb\uFFFD", 20},
		{"long text is cut on a rune boundary and marked", "ééééé", "éé…", 4},
		{"a right-to-left override is shown escaped", "v1\u202egnp.exe", `v1\u202egnp.exe`, 40},
		{"zero-width and isolate characters are shown escaped", "a\u200bb\u2066c\ufeff", `a\u200bb\u2066c\ufeff`, 40},
		{"an escaped text is cut after escaping", "\u202e\u202e", `\u202e…`, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := clean(tc.in, tc.max); got != tc.want {
				t.Errorf("clean(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

func failingDeployment(name string, uid string, gen int64, failed int32, phase fleetv1.DeploymentPhase) fleetv1.Deployment {
	d := fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps", UID: k8stypes.UID("uid-" + uid)}}
	d.Status.Phase = phase
	d.Status.Revision = &fleetv1.RevisionRef{UID: uid, Generation: gen, ID: "r"}
	d.Status.Counts = fleetv1.RolloutCounts{Total: 10, Failed: failed, Succeeded: 10 - failed}
	if failed > 0 {
		d.Status.LatestFailure = &fleetv1.DeviceFailure{Device: "paris-1", Error: "exit 1", Time: metav1.NewTime(testNow.Add(-time.Minute))}
	}
	return d
}

// testGrace are the alert durations of the tests: offline after an hour,
// never connected after ten minutes (the defaults).
var testGrace = grace{offlineAfter: time.Hour, neverConnectedAfter: DefaultNeverConnectedAfter}

func TestAnEnrolledDeviceThatNeverConnectedIsAnAlertAfterTheGracePeriod(t *testing.T) {
	enrolled := func(name string, ago time.Duration, liveness fleetv1.Liveness, hbAgo time.Duration, labels map[string]string) fleetv1.Device {
		d := device(name, liveness, hbAgo, labels)
		d.UID = k8stypes.UID("uid-" + name)
		d.CreationTimestamp = metav1.NewTime(testNow.Add(-ago))
		return d
	}
	tests := []struct {
		name string
		dev  fleetv1.Device
		want []string
	}{
		{"a device enrolled 11 minutes ago without a heartbeat is an alert", enrolled("n-1", 11*time.Minute, fleetv1.LivenessUnknown, -1, nil),
			[]string{"warning device-never-connected n-1: device n-1 has never connected: enrolled 11m ago, no heartbeat since"}},
		{"before the operator decided its liveness it is one too", enrolled("n-2", 3*time.Hour, "", -1, nil),
			[]string{"warning device-never-connected n-2: device n-2 has never connected: enrolled 3h ago, no heartbeat since"}},
		{"within the grace period it is none", enrolled("n-3", 9*time.Minute, fleetv1.LivenessUnknown, -1, nil), nil},
		{"a device that sent a heartbeat is none", enrolled("n-4", 3*time.Hour, fleetv1.LivenessOnline, time.Second, nil), nil},
		{"a quarantined device is none", enrolled("n-5", 3*time.Hour, fleetv1.LivenessUnknown, -1, map[string]string{fleetv1.LabelBlacklist: "true"}), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, a := range deriveAlerts([]fleetv1.Device{tc.dev}, nil, nil, testNow, testGrace) {
				got = append(got, fmt.Sprintf("%s %s %s: %s", a.Severity, a.Kind, a.Page.Key, a.Message))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("alerts (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("the overview counts it", func(t *testing.T) {
		o := overviewOf([]fleetv1.Device{enrolled("n-1", time.Hour, fleetv1.LivenessUnknown, -1, nil)}, nil, nil, testNow, testGrace)
		if o.Alerts != (AlertCounts{Total: 1, Warning: 1}) {
			t.Errorf("alert counts %+v", o.Alerts)
		}
	})
}

func TestDeriveAlerts(t *testing.T) {
	quarantined := device("q-1", fleetv1.LivenessStale, 10*time.Minute, map[string]string{fleetv1.LabelBlacklist: "true"})
	devs := []fleetv1.Device{
		device("online-1", fleetv1.LivenessOnline, time.Second, nil),
		device("stale-1", fleetv1.LivenessStale, 10*time.Minute, nil),
		device("gone-1", fleetv1.LivenessStale, 3*time.Hour, nil),
		device("never-1", fleetv1.LivenessUnknown, -1, nil),
		quarantined,
	}
	deps := []fleetv1.Deployment{
		failingDeployment("ok", "u1", 1, 0, fleetv1.PhaseSucceeded),
		failingDeployment("some-fail", "u2", 3, 2, fleetv1.PhaseProgressing),
		failingDeployment("failed", "u3", 1, 10, fleetv1.PhaseFailed),
	}
	as := deriveAlerts(devs, deps, nil, testNow, testGrace)
	got := []string{}
	for _, a := range as {
		got = append(got, fmt.Sprintf("%s %s %s", a.Severity, a.Kind, a.Page.Key))
	}
	want := []string{
		"critical deployment-failing apps/failed",
		"critical device-stale gone-1",
		"warning deployment-failing apps/some-fail",
		"warning device-stale stale-1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}

	t.Run("an alert's id is the same while its cause lasts", func(t *testing.T) {
		again := deriveAlerts(devs, deps, nil, testNow.Add(10*time.Minute), testGrace)
		ids := map[string]bool{}
		for _, a := range again {
			ids[a.ID] = true
		}
		for _, a := range as {
			if a.Kind == AlertDeploymentFailing && !ids[a.ID] {
				t.Errorf("alert %s (%s) changed id ten minutes later", a.ID, a.Message)
			}
		}
	})
	t.Run("a new episode has a new id", func(t *testing.T) {
		devs2 := []fleetv1.Device{device("stale-1", fleetv1.LivenessStale, 5*time.Minute, nil)}
		deps2 := []fleetv1.Deployment{failingDeployment("some-fail", "u2", 4, 2, fleetv1.PhaseProgressing)}
		for _, a := range deriveAlerts(devs2, deps2, nil, testNow, testGrace) {
			for _, b := range as {
				if a.ID == b.ID {
					t.Errorf("alert %s (%s) kept its id across episodes", a.ID, a.Message)
				}
			}
		}
	})
	t.Run("the overview counts them", func(t *testing.T) {
		o := overviewOf(devs, deps, nil, testNow, testGrace)
		if o.Alerts != (AlertCounts{Total: 4, Critical: 2, Warning: 2}) {
			t.Errorf("alert counts %+v", o.Alerts)
		}
		if o.Devices != (LivenessCounts{Total: 5, Online: 1, Stale: 2, Offline: 2}) {
			t.Errorf("device counts %+v", o.Devices)
		}
	})
}

func TestTrendBucketing(t *testing.T) {
	c := newTrendCounter()
	start := testNow.Add(-80 * time.Minute) // 11:10
	c.startLive(start)
	c.heartbeat(testNow.Add(-3 * time.Hour)) // 09:30: before the live count
	c.heartbeat(testNow.Add(-time.Minute))   // 12:29
	c.heartbeat(testNow.Truncate(time.Hour)) // 12:00 exactly: the 12:00 hour
	c.report(testNow.Add(-time.Hour), false) // 11:30
	c.report(testNow.Add(-time.Hour), true)
	c.report(testNow.Add(-25*time.Hour), true) // out of the window: dropped
	tr := c.trend(testNow)
	if len(tr.Hours) != TrendHours {
		t.Fatalf("%d hours", len(tr.Hours))
	}
	last := tr.Hours[TrendHours-1]
	if !last.Start.Equal(testNow.Truncate(time.Hour)) || last.Heartbeats != 2 || last.HeartbeatsPartial {
		t.Errorf("the current hour: %+v", last)
	}
	h11 := tr.Hours[TrendHours-2]
	if h11.Reports != 2 || h11.Failures != 1 || !h11.HeartbeatsPartial {
		t.Errorf("the 11:00 hour (started before the live count): %+v", h11)
	}
	if h9 := tr.Hours[TrendHours-4]; h9.Heartbeats != 1 || !h9.HeartbeatsPartial {
		t.Errorf("the 09:00 hour: %+v", h9)
	}
	total := 0
	for _, h := range tr.Hours {
		total += h.Failures
	}
	if total != 1 {
		t.Errorf("%d failures in the window, want 1 (the one older than 24 hours is out)", total)
	}
}

func TestChangesAreCoalesced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := newHub()
	ch := h.subscribe(ctx, 500*time.Millisecond, time.Now)
	// The first publish may go out alone; the rest pile up behind it.
	for i := range 100 {
		h.publish(PageRef{Kind: PageDevice, Key: fmt.Sprintf("d-%d", i%10)}, PageRef{Kind: PageOverview})
	}
	seen := map[PageRef]bool{}
	changes := 0
	for len(seen) < 11 {
		select {
		case c := <-ch:
			changes++
			for i, p := range c.Pages {
				if i > 0 && c.Pages[i-1] == p {
					t.Errorf("change lists %v twice", p)
				}
				seen[p] = true
			}
		case <-ctx.Done():
			t.Fatalf("saw %d pages of 11", len(seen))
		}
	}
	if changes > 3 {
		t.Errorf("100 publishes came as %d changes: want them coalesced", changes)
	}

	t.Run("too many pages become All", func(t *testing.T) {
		for i := range MaxPagesPerChange + 1 {
			h.publish(PageRef{Kind: PageDevice, Key: fmt.Sprint(i)})
		}
		for {
			select {
			case c := <-ch:
				if c.All {
					if !c.Affects(PageRef{Kind: PageDevice, Key: "anything"}) {
						t.Error("an All change does not affect a device page")
					}
					return
				}
			case <-ctx.Done():
				t.Fatal("no All change")
			}
		}
	})
	t.Run("the channel closes when ctx ends", func(t *testing.T) {
		cancel()
		for range ch {
		}
	})
}

func TestPagesOfAForgedWorkloadReport(t *testing.T) {
	ev, err := events.New(events.Keys{Device: "paris-1"}, events.WorkloadStatus{Namespace: "apps", Deployment: "web", Phase: events.WorkloadFailed,
		UID: "u", Generation: 1, RevisionID: "r", Since: testNow})
	if err != nil {
		t.Fatal(err)
	}
	got := pagesOfRecord(events.Record{Event: ev})
	want := []PageRef{{Kind: PageDevice, Key: "paris-1"}, {Kind: PageTrend}, {Kind: PageDeployment, Key: "apps/web"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pages (-want +got):\n%s", diff)
	}
	bad := ev
	bad.Data = []byte(`{"namespace":"a.b","deployment":"*","phase":"Failed"}`)
	for _, p := range pagesOfRecord(events.Record{Event: bad}) {
		if p.Kind == PageDeployment {
			t.Errorf("a report naming an invalid Deployment affects page %v", p)
		}
	}
}

// stalledDeployment is a Deployment whose rollout of generation gen the
// operator marked past its progress deadline at since (Progressing of
// condGen False, ProgressDeadlineExceeded).
func stalledDeployment(name string, gen, condGen int64, since time.Time) fleetv1.Deployment {
	d := failingDeployment(name, "u9", gen, 0, fleetv1.PhaseCanary)
	d.Status.ObservedGeneration = gen
	d.Status.Counts = fleetv1.RolloutCounts{Total: 2, Pending: 2, Canaries: 1}
	d.Status.Conditions = []metav1.Condition{
		{Type: fleetv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: gen, Reason: fleetv1.ReasonRolloutInProgress,
			Message: "0 of 1 canaries converged; progress deadline exceeded", LastTransitionTime: metav1.NewTime(since.Add(-time.Hour))},
		{Type: fleetv1.ConditionProgressing, Status: metav1.ConditionFalse, ObservedGeneration: condGen, Reason: fleetv1.ReasonProgressDeadlineExceeded,
			LastTransitionTime: metav1.NewTime(since), Message: "revision r: no progress within the progress deadline (10m0s); 1 waiting: podman-1 Pending since 2026-12-05T00:00:00Z: " +
				"registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1\x1b[2J"},
	}
	return d
}

func TestARolloutPastItsProgressDeadlineIsStalled(t *testing.T) {
	since := testNow.Add(-5 * time.Minute)
	for _, tc := range []struct {
		name    string
		dep     fleetv1.Deployment
		stalled bool
	}{
		{"Progressing False ProgressDeadlineExceeded of the status's generation is a stall", stalledDeployment("api", 2, 2, since), true},
		{"the condition of an earlier generation is not", stalledDeployment("api", 3, 2, since), false},
		{"a rollout that is progressing is not", failingDeployment("api", "u9", 1, 0, fleetv1.PhaseProgressing), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := deploymentSummary(&tc.dep)
			var alerts []string
			for _, a := range deriveAlerts(nil, []fleetv1.Deployment{tc.dep}, nil, testNow, testGrace) {
				if a.Kind == AlertRolloutStalled {
					alerts = append(alerts, fmt.Sprintf("%s %s %s", a.Severity, a.Page.Key, a.Since.Format(time.RFC3339)))
					if !strings.Contains(a.Message, "rollout stalled: ") || !strings.Contains(a.Message, "podman-1 Pending") || strings.Contains(a.Message, "\x1b") {
						t.Errorf("alert message %q: want the waiting device and its report, cleaned", a.Message)
					}
				}
			}
			if !tc.stalled {
				if s.Stalled != nil || len(alerts) > 0 {
					t.Errorf("stalled %+v, alerts %v; want none", s.Stalled, alerts)
				}
				return
			}
			if s.Stalled == nil || !s.Stalled.Since.Equal(since) || !strings.Contains(s.Stalled.Message, "registry unavailable, retrying") ||
				strings.Contains(s.Stalled.Message, "\x1b") {
				t.Errorf("stalled %+v, want since %s with the cleaned message", s.Stalled, since)
			}
			if diff := cmp.Diff([]string{"warning apps/api " + since.Format(time.RFC3339)}, alerts); diff != "" {
				t.Errorf("rollout-stalled alerts (-want +got):\n%s", diff)
			}
		})
	}
}

// degradedDeployment is a Succeeded Deployment of generation gen whose
// Degraded condition of condGen is status (True: devices degraded) since
// since.
func degradedDeployment(name string, gen, condGen int64, status metav1.ConditionStatus, since time.Time) fleetv1.Deployment {
	d := failingDeployment(name, "u7", gen, 0, fleetv1.PhaseSucceeded)
	d.Status.ObservedGeneration = gen
	d.Status.Counts = fleetv1.RolloutCounts{Total: 40, Succeeded: 40}
	reason := fleetv1.ReasonServicesDegraded
	if status != metav1.ConditionTrue {
		reason = fleetv1.ReasonNoDegradedDevices
	}
	d.Status.Conditions = []metav1.Condition{
		{Type: fleetv1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen, Reason: fleetv1.ReasonRolloutSucceeded,
			Message: "40 of 40 targets succeeded", LastTransitionTime: metav1.NewTime(since.Add(-time.Hour))},
		{Type: fleetv1.ConditionDegraded, Status: status, ObservedGeneration: condGen, Reason: reason, LastTransitionTime: metav1.NewTime(since),
			Message: "2 of 40 devices degraded: podman-1 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s), edge-7 (api: OOMKilled)\x1b[2J\u202e"},
	}
	return d
}

func TestADegradedDeploymentIsShownAndAlerted(t *testing.T) {
	since := testNow.Add(-3 * time.Minute)
	for _, tc := range []struct {
		name     string
		dep      fleetv1.Deployment
		degraded bool
	}{
		{"Degraded True of the status's generation is shown and alerted", degradedDeployment("api", 2, 2, metav1.ConditionTrue, since), true},
		{"Degraded False is neither shown nor alerted", degradedDeployment("api", 2, 2, metav1.ConditionFalse, since), false},
		{"Degraded True of an earlier generation is neither shown nor alerted", degradedDeployment("api", 3, 2, metav1.ConditionTrue, since), false},
		{"a Deployment without the condition (an older operator) is neither shown nor alerted", failingDeployment("api", "u7", 1, 0, fleetv1.PhaseSucceeded), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := deploymentSummary(&tc.dep)
			var alerts []string
			for _, a := range deriveAlerts(nil, []fleetv1.Deployment{tc.dep}, nil, testNow, testGrace) {
				if a.Kind == AlertDeploymentDegraded {
					alerts = append(alerts, fmt.Sprintf("%s %s %s", a.Severity, a.Page.Key, a.Since.Format(time.RFC3339)))
					if !strings.Contains(a.Message, "Deployment apps/api: services degraded: 2 of 40 devices degraded: podman-1 (api: CrashLoop") ||
						strings.ContainsAny(a.Message, "\x1b\u202e") {
						t.Errorf("alert message %q: want the condition's message, cleaned", a.Message)
					}
				}
			}
			if !tc.degraded {
				if s.Degraded != nil || len(alerts) > 0 {
					t.Errorf("degraded %+v, alerts %v; want none", s.Degraded, alerts)
				}
				return
			}
			if s.Degraded == nil || !s.Degraded.Since.Equal(since) || !strings.Contains(s.Degraded.Message, "3 restarts in 5m0s") ||
				strings.ContainsAny(s.Degraded.Message, "\x1b\u202e") {
				t.Fatalf("degraded %+v, want since %s with the cleaned message", s.Degraded, since)
			}
			if s.Phase != string(fleetv1.PhaseSucceeded) {
				t.Errorf("phase %s: degradation never rewrites a rollout that succeeded", s.Phase)
			}
			if diff := cmp.Diff([]string{"warning apps/api " + since.Format(time.RFC3339)}, alerts); diff != "" {
				t.Errorf("deployment-degraded alerts (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("a new episode of degradation has a new id", func(t *testing.T) {
		ids := func(d fleetv1.Deployment) []string {
			var out []string
			for _, a := range deriveAlerts(nil, []fleetv1.Deployment{d}, nil, testNow, testGrace) {
				out = append(out, a.ID)
			}
			return out
		}
		first := ids(degradedDeployment("api", 2, 2, metav1.ConditionTrue, since))
		same := ids(degradedDeployment("api", 2, 2, metav1.ConditionTrue, since))
		again := ids(degradedDeployment("api", 2, 2, metav1.ConditionTrue, since.Add(time.Minute)))
		next := ids(degradedDeployment("api", 3, 3, metav1.ConditionTrue, since))
		if len(first) != 1 || !cmp.Equal(first, same) || cmp.Equal(first, again) || cmp.Equal(first, next) {
			t.Errorf("ids: first %v, same cause %v, degraded again %v, next revision %v", first, same, again, next)
		}
	})
}

func TestPagesOfHealthAndContainerReports(t *testing.T) {
	health := func(t *testing.T, typ events.Type, ns, name string) events.Event {
		t.Helper()
		ev, err := events.New(events.Keys{Device: "paris-1"}, events.NewWorkloadHealth(typ, events.WorkloadHealth{Namespace: ns, Deployment: name,
			UID: "u", Generation: 1, RevisionID: "r", Reason: events.HealthCrashLoop, Since: testNow}))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	containers, err := events.New(events.Keys{Device: "paris-1"}, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "apps", Deployment: "web"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ev   events.Event
		want []PageRef
	}{
		{"a Degraded report changes the device's and the Deployment's pages", health(t, events.TypeWorkloadDegraded, "apps", "web"),
			[]PageRef{{Kind: PageDevice, Key: "paris-1"}, {Kind: PageDeployment, Key: "apps/web"}}},
		{"a Recovered report changes the same pages", health(t, events.TypeWorkloadRecovered, "apps", "web"),
			[]PageRef{{Kind: PageDevice, Key: "paris-1"}, {Kind: PageDeployment, Key: "apps/web"}}},
		{"a report naming an invalid Deployment changes the device's page only", health(t, events.TypeWorkloadDegraded, "a.b", "*"),
			[]PageRef{{Kind: PageDevice, Key: "paris-1"}}},
		{"a container report changes the device's page", containers, []PageRef{{Kind: PageDevice, Key: "paris-1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, pagesOfRecord(events.Record{Event: tc.ev})); diff != "" {
				t.Errorf("pages (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRolloutProgressAndTheCanaryGateSayTheSameAsTheStage(t *testing.T) {
	tests := []struct {
		name     string
		st       history.RolloutState
		plan     *PlanStage
		gate     string
		progress []StageProgress
	}{
		{"converged canaries awaiting the approval of batch 1 passed the gate, not waiting for them",
			history.RolloutState{Stage: projections.StageCanariesConverged, Counts: events.RolloutCounts{Total: 5, Canaries: 2, CanariesSucceeded: 2, Succeeded: 2},
				Batches: []history.BatchProgress{{Size: 3, SuccessPercent: 100}}},
			&PlanStage{Batches: 1, AwaitingApproval: 1}, GateConverged,
			[]StageProgress{{Name: "Canaries", Size: 2, Succeeded: 2, State: StageSucceeded}, {Name: "Batch 1", Size: 3, Pending: 3, State: StageAwaitingApproval}}},
		{"a succeeded plan shows every batch succeeded, none started",
			history.RolloutState{Stage: projections.StageSucceeded, Counts: events.RolloutCounts{Total: 3, Succeeded: 3},
				Batches: []history.BatchProgress{{Size: 1, Converged: 1, Started: true, Succeeded: true, Approved: true, ApprovedBy: "oidc:ada"}, {Size: 2, Converged: 2, Started: true, Succeeded: true}}},
			&PlanStage{Batch: 2, Batches: 2}, "",
			[]StageProgress{{Name: "Batch 1", Size: 1, Succeeded: 1, State: StageSucceeded, By: "oidc:ada"}, {Name: "Batch 2", Size: 2, Succeeded: 2, State: StageSucceeded}}},
		{"a running batch with a failure and pending devices",
			history.RolloutState{Stage: projections.StageBatches, Counts: events.RolloutCounts{Total: 4, Succeeded: 1, Failed: 1, Pending: 2},
				Batches: []history.BatchProgress{{Size: 4, Converged: 1, Failures: 1, Started: true}}},
			&PlanStage{Batch: 1, Batches: 1}, "",
			[]StageProgress{{Name: "Batch 1", Size: 4, Succeeded: 1, Failed: 1, Pending: 2, State: StageRunning}}},
		{"a failed canary blocks the release, which never starts",
			history.RolloutState{Stage: projections.StageFailed, Counts: events.RolloutCounts{Total: 4, Canaries: 1, CanariesFailed: 1, Failed: 1, Pending: 3}},
			nil, GateBlocked,
			[]StageProgress{{Name: "Canaries", Size: 1, Failed: 1, State: StageFailed}, {Name: "Release", Size: 3, Pending: 3, State: StageNotStarted}}},
		{"without a plan the release runs after the canaries",
			history.RolloutState{Stage: projections.StageReleased, Counts: events.RolloutCounts{Total: 4, Canaries: 1, CanariesSucceeded: 1, Succeeded: 2, Pending: 2}},
			nil, GatePassed,
			[]StageProgress{{Name: "Canaries", Size: 1, Succeeded: 1, State: StageSucceeded}, {Name: "Release", Size: 3, Succeeded: 1, Pending: 2, State: StageRunning}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gate := ""
			if cs := canaryStageOf(tc.st.Stage, tc.st.Counts); cs != nil {
				gate = cs.Gate
			}
			if gate != tc.gate {
				t.Errorf("gate %q, want %q", gate, tc.gate)
			}
			if diff := cmp.Diff(tc.progress, progressOf(&tc.st, tc.plan)); diff != "" {
				t.Errorf("progress (-want +got):\n%s", diff)
			}
		})
	}
}
