package fleetview

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// Clean is clean for the dashboard's own pages: text a device sent that
// reaches a page by another way than the view (an agent's answer to a
// command), escaped and cut as the view's.
func Clean(s string, max int) string { return clean(s, max) }

// clean bounds a string that may come from a device: bytes that are not
// UTF-8 and control characters become U+FFFD, characters that are invisible
// or reorder the text around them (a right-to-left override, say) become a
// visible escape (events.Printable), and it is cut at max bytes (on a rune
// boundary) with "…" appended.
func clean(s string, max int) string {
	ok := len(s) <= max && utf8.ValidString(s)
	if ok {
		for _, r := range s {
			if unicode.IsControl(r) || events.Invisible(r) {
				ok = false
				break
			}
		}
	}
	if ok {
		return s
	}
	s = events.Printable(strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s))
	if len(s) <= max {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i >= max {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

// grace holds the durations alerts wait for: a stale device is offline
// after offlineAfter, an enrolled device that never sent a heartbeat is an
// alert after neverConnectedAfter.
type grace struct{ offlineAfter, neverConnectedAfter time.Duration }

// neverConnectedAlert is the alert of a Device created more than after ago
// that has never sent a heartbeat (no lastHeartbeat, liveness Unknown or
// not decided yet): enrolled, never connected. Its episode is the Device's
// UID: it ends with the first heartbeat.
func neverConnectedAlert(d *fleetv1.Device, now time.Time, after time.Duration) (Alert, bool) {
	if d.Status.LastHeartbeat != nil || d.Status.Liveness == fleetv1.LivenessOnline || d.Status.Liveness == fleetv1.LivenessStale ||
		d.CreationTimestamp.IsZero() || now.Sub(d.CreationTimestamp.Time) < after {
		return Alert{}, false
	}
	created := d.CreationTimestamp.UTC()
	return Alert{ID: alertID(AlertDeviceNeverConnected, d.Namespace, d.Name, string(d.UID), created.Format(time.RFC3339)),
		Kind: AlertDeviceNeverConnected, Severity: SeverityWarning, Page: PageRef{Kind: PageDevice, Key: d.Name}, Since: created,
		Message: fmt.Sprintf("device %s has never connected: enrolled %s, no heartbeat since", d.Name, Ago(created, now))}, true
}

// livenessOf splits the Device CR's liveness by offlineAfter.
func livenessOf(d *fleetv1.Device, now time.Time, offlineAfter time.Duration) Liveness {
	switch d.Status.Liveness {
	case fleetv1.LivenessOnline:
		return LivenessOnline
	case fleetv1.LivenessStale:
		if hb := d.Status.LastHeartbeat; hb != nil && now.Sub(hb.Time) < offlineAfter {
			return LivenessStale
		}
	}
	return LivenessOffline
}

// sortedLabels returns m as labels sorted by key, at most max, cleaned.
func sortedLabels(m map[string]string, max int) ([]Label, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	truncated := len(keys) > max
	if truncated {
		keys = keys[:max]
	}
	out := make([]Label, 0, len(keys))
	for _, k := range keys {
		out = append(out, Label{Key: clean(k, MaxFieldLength), Value: clean(m[k], MaxFieldLength)})
	}
	return out, truncated
}

// deviceRow is the list row of d.
func deviceRow(d *fleetv1.Device, now time.Time, offlineAfter time.Duration) DeviceRow {
	r := DeviceRow{ID: d.Name, Namespace: d.Namespace, Liveness: livenessOf(d, now, offlineAfter)}
	if hb := d.Status.LastHeartbeat; hb != nil {
		r.LastHeartbeat = hb.UTC()
	}
	r.Labels, r.LabelsTruncated = sortedLabels(d.Labels, MaxLabels)
	for _, w := range d.Status.Workloads {
		if len(r.Runs) == MaxRunsShown {
			r.RunsMore++
			continue
		}
		r.Runs = append(r.Runs, Running{Namespace: clean(w.Namespace, MaxFieldLength), Deployment: clean(w.Deployment, MaxFieldLength),
			Revision: clean(w.Revision, MaxFieldLength), Degraded: clean(w.Degraded, MaxFieldLength)})
	}
	if inv := d.Status.Inventory; inv != nil {
		r.Inventory = Inventory{OS: clean(inv.OS, MaxFieldLength), Arch: clean(inv.Arch, MaxFieldLength),
			Kernel: clean(inv.Kernel, MaxFieldLength), AgentVersion: clean(inv.AgentVersion, MaxFieldLength)}
	}
	_, r.Quarantined = d.Labels[fleetv1.LabelBlacklist]
	return r
}

// deviceFilter is a parsed DeviceQuery.
type deviceFilter struct {
	sel      labels.Selector // nil: every device
	liveness Liveness
	search   string // lower case
	offset   int
	limit    int
}

// parseDeviceQuery validates q; errors are ErrInvalidQuery naming the field.
func parseDeviceQuery(q DeviceQuery) (deviceFilter, error) {
	f := deviceFilter{liveness: q.Liveness, offset: q.Offset, limit: q.Limit}
	if s := strings.TrimSpace(q.Selector); s != "" {
		sel, err := labels.Parse(s)
		if err != nil {
			return f, fmt.Errorf("%w: selector %q: %v: write a label selector such as site=paris,tier!=core or tier in (edge,core)",
				ErrInvalidQuery, clean(s, MaxSearch), err)
		}
		f.sel = sel
	}
	switch q.Liveness {
	case "", LivenessOnline, LivenessStale, LivenessOffline:
	default:
		return f, fmt.Errorf("%w: liveness %q: use online, stale, offline or nothing for any", ErrInvalidQuery, clean(string(q.Liveness), MaxSearch))
	}
	if len(q.Search) > MaxSearch {
		return f, fmt.Errorf("%w: search is %d bytes: use at most %d", ErrInvalidQuery, len(q.Search), MaxSearch)
	}
	f.search = strings.ToLower(strings.TrimSpace(q.Search))
	if q.Offset < 0 {
		return f, fmt.Errorf("%w: offset %d: use 0 or more", ErrInvalidQuery, q.Offset)
	}
	switch {
	case q.Limit < 0 || q.Limit > MaxPageSize:
		return f, fmt.Errorf("%w: limit %d: use 1 to %d (0: %d)", ErrInvalidQuery, q.Limit, MaxPageSize, DefaultPageSize)
	case q.Limit == 0:
		f.limit = DefaultPageSize
	}
	return f, nil
}

// containsFold reports whether s contains the lower-case sub, ignoring case.
func containsFold(s, sub string) bool {
	if len(sub) > len(s) {
		return false
	}
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// matchSearch reports whether d matches the search text.
func matchSearch(d *fleetv1.Device, search string) bool {
	if containsFold(d.Name, search) || containsFold(d.Namespace, search) {
		return true
	}
	for k, v := range d.Labels {
		if containsFold(k, search) || containsFold(v, search) {
			return true
		}
	}
	if inv := d.Status.Inventory; inv != nil {
		for _, s := range []string{inv.OS, inv.Arch, inv.Kernel, inv.AgentVersion} {
			if containsFold(s, search) {
				return true
			}
		}
	}
	return false
}

// pageDevices filters, sorts by id (then namespace) and pages devices.
func pageDevices(devices []fleetv1.Device, f deviceFilter, now time.Time, offlineAfter time.Duration) DevicePage {
	matched := make([]*fleetv1.Device, 0, len(devices))
	for i := range devices {
		d := &devices[i]
		if f.sel != nil && !f.sel.Matches(labels.Set(d.Labels)) {
			continue
		}
		if f.liveness != "" && livenessOf(d, now, offlineAfter) != f.liveness {
			continue
		}
		if f.search != "" && !matchSearch(d, f.search) {
			continue
		}
		matched = append(matched, d)
	}
	slices.SortFunc(matched, func(a, b *fleetv1.Device) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Namespace, b.Namespace))
	})
	p := DevicePage{Matched: len(matched), Total: len(devices), Offset: f.offset, Limit: f.limit, Items: []DeviceRow{}}
	if f.offset < len(matched) {
		for _, d := range matched[f.offset:min(len(matched), f.offset+f.limit)] {
			p.Items = append(p.Items, deviceRow(d, now, offlineAfter))
		}
	}
	return p
}

// alertID is a stable id for an alert: its kind, subject and episode.
func alertID(kind AlertKind, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return string(kind) + "-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// deriveAlerts derives the alerts of the state: a device stale or offline
// (the episode is its last heartbeat: a device that never heartbeated is
// offline, not alerted, since it may not be installed yet); a Deployment
// whose current revision has failed targets or is Failed (the episode is the
// revision: UID and generation); a Deployment past its progress deadline
// or degraded (the episode is the revision and the condition's
// transition); a TaskRun with failed targets (its UID).
// Quarantined devices are not alerted. Sorted by severity, then since
// (newest first), then id.
func deriveAlerts(devs []fleetv1.Device, deps []fleetv1.Deployment, trs []fleetv1.TaskRun, now time.Time, g grace) []Alert {
	out := []Alert{}
	offlineAfter := g.offlineAfter
	for i := range devs {
		d := &devs[i]
		if _, q := d.Labels[fleetv1.LabelBlacklist]; q {
			continue
		}
		if a, ok := neverConnectedAlert(d, now, g.neverConnectedAfter); ok {
			out = append(out, a)
			continue
		}
		hb := d.Status.LastHeartbeat
		if hb == nil || d.Status.Liveness != fleetv1.LivenessStale {
			continue
		}
		l := livenessOf(d, now, offlineAfter)
		sev := SeverityWarning
		if l == LivenessOffline {
			sev = SeverityCritical
		}
		out = append(out, Alert{ID: alertID(AlertDeviceStale, d.Namespace, d.Name, hb.UTC().Format(time.RFC3339Nano)),
			Kind: AlertDeviceStale, Severity: sev, Page: PageRef{Kind: PageDevice, Key: d.Name}, Since: hb.UTC(),
			Message: fmt.Sprintf("device %s is %s: last heartbeat %s", d.Name, l, Ago(hb.Time, now))})
	}
	for i := range deps {
		d := &deps[i]
		st := d.Status
		if st.Counts.Failed == 0 && st.Phase != fleetv1.PhaseFailed {
			continue
		}
		rev := ""
		if st.Revision != nil {
			rev = fmt.Sprintf("%s/%d", st.Revision.UID, st.Revision.Generation)
		}
		a := Alert{ID: alertID(AlertDeploymentFailing, d.Namespace, d.Name, string(d.UID), rev), Kind: AlertDeploymentFailing,
			Severity: SeverityWarning, Page: PageRef{Kind: PageDeployment, Key: d.Namespace + "/" + d.Name}}
		if st.Phase == fleetv1.PhaseFailed {
			a.Severity = SeverityCritical
		}
		a.Message = fmt.Sprintf("Deployment %s/%s: %d of %d targets failed (phase %s)", d.Namespace, d.Name, st.Counts.Failed, st.Counts.Total, dash(string(st.Phase)))
		if f := st.LatestFailure; f != nil {
			a.Since = f.Time.UTC()
			a.Message += fmt.Sprintf("; latest: %s: %s", f.Device, clean(f.Error, MaxFieldLength))
		} else if c := readyCondition(st.Conditions); c != nil {
			a.Since = c.LastTransitionTime.UTC()
			a.Message += "; " + clean(c.Message, MaxFieldLength)
		}
		out = append(out, a)
	}
	for i := range deps {
		d := &deps[i]
		s := stalledOf(d.Status)
		if s == nil {
			continue
		}
		// The episode is the revision and the deadline's end: progress
		// and a new stall make a new one.
		out = append(out, Alert{ID: alertID(AlertRolloutStalled, d.Namespace, d.Name, string(d.UID), strconv.FormatInt(d.Status.ObservedGeneration, 10),
			s.Since.Format(time.RFC3339Nano)), Kind: AlertRolloutStalled, Severity: SeverityWarning,
			Page: PageRef{Kind: PageDeployment, Key: d.Namespace + "/" + d.Name}, Since: s.Since,
			Message: fmt.Sprintf("Deployment %s/%s: rollout stalled: %s", d.Namespace, d.Name, clean(s.Message, MaxFieldLength))})
	}
	for i := range deps {
		if a, ok := degradedAlert(&deps[i]); ok {
			out = append(out, a)
		}
	}
	for i := range trs {
		t := &trs[i]
		if t.Status.Counts.Failed == 0 {
			continue
		}
		a := Alert{ID: alertID(AlertTaskRunFailing, t.Namespace, t.Name, string(t.UID)), Kind: AlertTaskRunFailing, Severity: SeverityWarning,
			Page:    PageRef{Kind: PageTaskRun, Key: t.Namespace + "/" + t.Name},
			Message: fmt.Sprintf("TaskRun %s/%s (%s): %d of %d targets failed", t.Namespace, t.Name, t.Spec.Task, t.Status.Counts.Failed, t.Status.Counts.Targets)}
		if f := t.Status.LatestFailure; f != nil {
			a.Since = f.Time.UTC()
			a.Message += fmt.Sprintf("; latest: %s: %s", f.Device, clean(f.Message, MaxFieldLength))
		}
		out = append(out, a)
	}
	rank := map[Severity]int{SeverityCritical: 0, SeverityWarning: 1}
	slices.SortFunc(out, func(a, b Alert) int {
		return cmp.Or(cmp.Compare(rank[a.Severity], rank[b.Severity]), b.Since.Compare(a.Since), cmp.Compare(a.ID, b.ID))
	})
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stalledOf is the stall of st's revision: its Progressing condition of
// the status's generation False with reason ProgressDeadlineExceeded (nil:
// none).
func stalledOf(st fleetv1.DeploymentStatus) *Stalled {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == fleetv1.ConditionProgressing && c.Status == metav1.ConditionFalse && c.Reason == fleetv1.ReasonProgressDeadlineExceeded &&
			c.ObservedGeneration == st.ObservedGeneration {
			return &Stalled{Since: c.LastTransitionTime.UTC(), Message: clean(c.Message, MaxErrorLength)}
		}
	}
	return nil
}

func readyCondition(cs []metav1.Condition) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == fleetv1.ConditionReady {
			return &cs[i]
		}
	}
	return nil
}

// countAlerts counts alerts by severity.
func countAlerts(as []Alert) AlertCounts {
	c := AlertCounts{Total: len(as)}
	for _, a := range as {
		switch a.Severity {
		case SeverityCritical:
			c.Critical++
		case SeverityWarning:
			c.Warning++
		}
	}
	return c
}

// deploymentPhases and taskRunPhases list every phase in display order.
var (
	deploymentPhases = []string{string(fleetv1.PhasePending), string(fleetv1.PhaseCanary), string(fleetv1.PhaseProgressing),
		string(fleetv1.PhaseSucceeded), string(fleetv1.PhaseFailed), ""}
	taskRunPhases = []string{string(fleetv1.TaskRunPending), string(fleetv1.TaskRunRunning), string(fleetv1.TaskRunSucceeded),
		string(fleetv1.TaskRunFailed), ""}
)

// countPhases counts phases in the order of known; an unknown phase is
// counted as "".
func countPhases(known []string, phases []string) []PhaseCount {
	out := make([]PhaseCount, len(known))
	idx := map[string]int{}
	for i, p := range known {
		out[i].Phase = p
		idx[p] = i
	}
	for _, p := range phases {
		i, ok := idx[p]
		if !ok {
			i = idx[""]
		}
		out[i].Count++
	}
	return out
}

// overviewOf computes the overview.
func overviewOf(devs []fleetv1.Device, deps []fleetv1.Deployment, trs []fleetv1.TaskRun, now time.Time, g grace) Overview {
	offlineAfter := g.offlineAfter
	o := Overview{At: now.UTC()}
	for i := range devs {
		d := &devs[i]
		o.Devices.Total++
		switch livenessOf(d, now, offlineAfter) {
		case LivenessOnline:
			o.Devices.Online++
		case LivenessStale:
			o.Devices.Stale++
		default:
			o.Devices.Offline++
		}
		if _, q := d.Labels[fleetv1.LabelBlacklist]; q {
			o.Quarantined++
		}
	}
	ph := make([]string, 0, len(deps))
	for i := range deps {
		ph = append(ph, string(deps[i].Status.Phase))
	}
	o.Deployments = countPhases(deploymentPhases, ph)
	ph = ph[:0]
	for i := range trs {
		ph = append(ph, string(trs[i].Status.Phase))
	}
	o.TaskRuns = countPhases(taskRunPhases, ph)
	o.Alerts = countAlerts(deriveAlerts(devs, deps, trs, now, g))
	return o
}

// deploymentSummary is the list row of d, from its status.
func deploymentSummary(d *fleetv1.Deployment) DeploymentSummary {
	st := d.Status
	s := DeploymentSummary{Namespace: d.Namespace, Name: d.Name, Phase: string(st.Phase), Generation: d.Generation,
		ObservedGeneration: st.ObservedGeneration, Created: d.CreationTimestamp.UTC(),
		Targets: TargetCounts{Total: int(st.Counts.Total), Succeeded: int(st.Counts.Succeeded), Pending: int(st.Counts.Pending),
			Failed: int(st.Counts.Failed), Removed: int(st.Counts.Removed), Canaries: int(st.Counts.Canaries),
			CanariesSucceeded: int(st.Counts.CanariesSucceeded), CanariesFailed: int(st.Counts.CanariesFailed)}}
	if st.Revision != nil {
		s.RevisionID = st.Revision.ID
	}
	if f := st.LatestFailure; f != nil {
		s.LatestFailure = &Failure{Device: f.Device, Error: clean(f.Error, MaxErrorLength), Time: f.Time.UTC()}
	}
	if c := readyCondition(st.Conditions); c != nil {
		s.ReadyReason, s.ReadyMessage = c.Reason, clean(c.Message, MaxErrorLength)
	}
	s.Canary = st.Counts.Canaries > 0
	s.Stalled = stalledOf(st)
	s.Degraded = degradedOf(st)
	return s
}

// countsOf converts rollout counts.
func countsOf(c events.RolloutCounts, removed int) TargetCounts {
	return TargetCounts{Total: c.Total, Succeeded: c.Succeeded, Pending: c.Pending, Failed: c.Failed, Removed: removed,
		Canaries: c.Canaries, CanariesSucceeded: c.CanariesSucceeded, CanariesFailed: c.CanariesFailed}
}

// targetStateOf is the bucket the rollout fold counts a target of this
// latest phase in (projections.Rollout.Counts decides, not this package).
func targetStateOf(phase events.WorkloadPhase) TargetState {
	r := projections.Rollout{Targets: []string{"d"}, Results: map[string]projections.DeviceResult{"d": {Phase: phase}}}
	c := r.Counts()
	switch {
	case c.Succeeded == 1:
		return TargetSucceeded
	case c.Failed == 1:
		return TargetFailed
	}
	return TargetPending
}

// canaryStageOf describes the canary gate of a rollout state; nil without
// canaries.
func canaryStageOf(stage projections.Stage, c events.RolloutCounts) *CanaryStage {
	if c.Canaries == 0 {
		return nil
	}
	cs := &CanaryStage{Canaries: c.Canaries, Succeeded: c.CanariesSucceeded, Failed: c.CanariesFailed,
		Pending: c.Canaries - c.CanariesSucceeded - c.CanariesFailed, Gate: GateWaiting}
	switch stage {
	case projections.StageCanariesConverged:
		// Every canary converged; the release (or the first batch) has
		// not started yet: it waits for an approval, or for the runner.
		cs.Gate = GateConverged
	case projections.StageBatches, projections.StageReleased, projections.StageSucceeded:
		cs.Gate = GatePassed
	case projections.StageFailed:
		if c.CanariesFailed > 0 {
			cs.Gate = GateBlocked
		} else {
			cs.Gate = GatePassed
		}
	}
	return cs
}

// progressOf is a rollout's progress stage by stage, from the fold's state
// and (for the batch awaiting approval) the Deployment's plan status.
func progressOf(st *history.RolloutState, plan *PlanStage) []StageProgress {
	c := st.Counts
	var out []StageProgress
	ended := st.Stage == projections.StageSucceeded || st.Stage == projections.StageFailed
	if c.Canaries > 0 {
		p := StageProgress{Name: "Canaries", Size: c.Canaries, Succeeded: c.CanariesSucceeded, Failed: c.CanariesFailed}
		switch cs := canaryStageOf(st.Stage, c); {
		case cs.Gate == GateBlocked:
			p.State = StageFailed
		case cs.Gate == GatePassed || cs.Gate == GateConverged:
			p.State = StageSucceeded
		case st.Stage == projections.StageNone || st.Stage == projections.StageStarted:
			p.State = StageWaiting
		default:
			p.State = StageRunning
		}
		out = append(out, p.pending())
	}
	if len(st.Batches) > 0 {
		for i, b := range st.Batches {
			p := StageProgress{Name: fmt.Sprintf("Batch %d", i+1), Size: b.Size, Succeeded: b.Converged, Failed: b.Failures, By: clean(b.ApprovedBy, MaxFieldLength)}
			switch {
			case b.Failed:
				p.State = StageFailed
			case b.Succeeded:
				p.State = StageSucceeded
			case b.Soaking:
				p.State = StageSoaking
			case b.Started:
				p.State = StageRunning
			case plan != nil && plan.AwaitingApproval == i+1:
				p.State = StageAwaitingApproval
			case ended:
				p.State = StageNotStarted
			default:
				p.State = StageWaiting
			}
			out = append(out, p.pending())
		}
		return out
	}
	others := c.Total - c.Canaries
	if others <= 0 {
		return out
	}
	p := StageProgress{Name: "Release", Size: others, Succeeded: c.Succeeded - c.CanariesSucceeded, Failed: c.Failed - c.CanariesFailed}
	switch {
	case st.Stage == projections.StageSucceeded:
		p.State = StageSucceeded
	case st.Stage == projections.StageFailed && p.Succeeded+p.Failed > 0:
		p.State = StageFailed
	case st.Stage == projections.StageFailed:
		p.State = StageNotStarted
	case releasedPast(st.Stage):
		p.State = StageRunning
	default:
		p.State = StageWaiting
	}
	return append(out, p.pending())
}

// releasedPast reports whether a stage is past the canaries.
func releasedPast(s projections.Stage) bool {
	return s == projections.StageReleased || s == projections.StageBatches
}

// pending fills Pending: the members with neither result.
func (p StageProgress) pending() StageProgress {
	p.Pending = max(0, p.Size-p.Succeeded-p.Failed)
	return p
}

// stateRank orders target rows: failed first, then pending, then
// succeeded.
var stateRank = map[TargetState]int{TargetFailed: 0, TargetPending: 1, TargetSucceeded: 2, TargetRemoved: 3}

// newestFirst returns the last max entries of a timeline, newest first,
// cleaned.
func newestFirst[E any](entries []E, max int, conv func(E) TimelineEntry) []TimelineEntry {
	out := make([]TimelineEntry, 0, min(max, len(entries)))
	for i := len(entries) - 1; i >= 0 && len(out) < max; i-- {
		out = append(out, conv(entries[i]))
	}
	return out
}
