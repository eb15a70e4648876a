package fleetview

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Overview implements Source.
func (v *View) Overview(ctx context.Context) (Overview, error) {
	devs, deps, trs, err := v.all(ctx)
	if err != nil {
		return Overview{}, err
	}
	return overviewOf(devs, deps, trs, v.o.Now(), v.grace()), nil
}

// all lists the three kinds.
func (v *View) all(ctx context.Context) ([]fleetv1.Device, []fleetv1.Deployment, []fleetv1.TaskRun, error) {
	devs, err := v.objs.devices(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	deps, err := v.objs.deployments(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	trs, err := v.objs.taskRuns(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return devs, deps, trs, nil
}

// Devices implements Source.
func (v *View) Devices(ctx context.Context, q DeviceQuery) (DevicePage, error) {
	f, err := parseDeviceQuery(q)
	if err != nil {
		return DevicePage{}, err
	}
	devs, err := v.objs.devices(ctx)
	if err != nil {
		return DevicePage{}, err
	}
	return pageDevices(devs, f, v.o.Now(), v.o.OfflineAfter), nil
}

// findDevice returns the Device of id: the oldest of that name (the one the
// operator serves when namesakes exist in several namespaces).
func findDevice(devs []fleetv1.Device, id string) (*fleetv1.Device, bool) {
	var found *fleetv1.Device
	for i := range devs {
		d := &devs[i]
		if d.Name != id {
			continue
		}
		if found == nil || d.CreationTimestamp.Before(&found.CreationTimestamp) {
			found = d
		}
	}
	return found, found != nil
}

// Device implements Source.
func (v *View) Device(ctx context.Context, id string) (DeviceDetail, error) {
	if len(id) > MaxSearch {
		return DeviceDetail{}, fmt.Errorf("%w: device id of %d bytes: a device id is at most %d characters", ErrInvalidQuery, len(id), events.MaxTokenLength)
	}
	devs, err := v.objs.devices(ctx)
	if err != nil {
		return DeviceDetail{}, err
	}
	d, ok := findDevice(devs, id)
	if !ok {
		return DeviceDetail{}, fmt.Errorf("device %s: %w: no Device of that name in any namespace", id, ErrNotFound)
	}
	dd := DeviceDetail{DeviceRow: deviceRow(d, v.o.Now(), v.o.OfflineAfter), Conditions: conditionsOf(d.Status.Conditions),
		Deployments: []DeviceDeployment{}, Timeline: []TimelineEntry{}, Heartbeats: Heartbeats{AgentVersions: []string{}}, Workloads: []DeviceWorkload{}}
	if err := events.ValidateToken(events.TokenDevice, id); err != nil {
		dd.TimelineError = fmt.Sprintf("the device has no stream subjects: %v", err)
		return dd, nil
	}
	tl, err := v.hist.Device(ctx, id)
	switch {
	case errors.Is(err, history.ErrNoEvents):
		return dd, nil
	case err != nil:
		if ctx.Err() != nil {
			return DeviceDetail{}, ctx.Err()
		}
		v.o.Logger.Warn("device timeline unreadable", "device", id, "err", err)
		dd.TimelineError = fmt.Sprintf("the device's timeline could not be read from the streams: %v", err)
		return dd, nil
	}
	dd.Deployments = deviceDeployments(id, tl)
	for _, t := range tl.Tasks {
		dd.Tasks = append(dd.Tasks, DeviceTask{Namespace: t.Namespace, Name: t.TaskRun, Task: t.Task})
	}
	hb := tl.Heartbeats
	dd.Heartbeats = Heartbeats{Last: hb.Last, Kept: hb.Count, Uptime: hb.Uptime, AgentVersions: make([]string, 0, len(hb.AgentVersions))}
	for _, a := range hb.AgentVersions {
		dd.Heartbeats.AgentVersions = append(dd.Heartbeats.AgentVersions, clean(a, MaxFieldLength))
	}
	dd.Timeline = newestFirst(tl.Entries, MaxTimeline, timelineEntry)
	if c := tl.Containers; c != nil {
		dd.Workloads, dd.WorkloadsTruncated = deviceWorkloads(c)
		dd.WorkloadsAt = c.Stored
	}
	return dd, nil
}

// conditionsOf converts conditions.
func conditionsOf(cs []metav1.Condition) []Condition {
	out := make([]Condition, 0, len(cs))
	for _, c := range cs {
		out = append(out, Condition{Type: c.Type, Status: string(c.Status), Reason: c.Reason, Message: clean(c.Message, MaxErrorLength),
			Since: c.LastTransitionTime.UTC()})
	}
	return out
}

// deviceDeployments joins a device's desired state with its latest workload
// report per Deployment. Only reports stored on the device's own subject
// count (the history package reads only those; the check is repeated).
func deviceDeployments(id string, tl *history.DeviceTimeline) []DeviceDeployment {
	type key struct{ ns, name string }
	rows := map[key]*DeviceDeployment{}
	for _, in := range tl.Intent {
		rows[key{in.Namespace, in.Name}] = &DeviceDeployment{Namespace: in.Namespace, Name: in.Name, Generation: in.Generation,
			RevisionID: in.RevisionID, Desired: true}
	}
	for _, e := range tl.Entries {
		if e.Type != events.TypeWorkloadStatus || e.Device != id {
			continue
		}
		var ws events.WorkloadStatus
		if err := json.Unmarshal(e.Data, &ws); err != nil {
			continue
		}
		if events.ValidateToken(events.TokenNamespace, ws.Namespace) != nil || events.ValidateToken(events.TokenName, ws.Deployment) != nil {
			continue
		}
		k := key{ws.Namespace, ws.Deployment}
		r := rows[k]
		if r == nil {
			r = &DeviceDeployment{Namespace: ws.Namespace, Name: ws.Deployment}
			rows[k] = r
		}
		r.Reported = &WorkloadReport{Generation: ws.Generation, RevisionID: clean(ws.RevisionID, MaxFieldLength), Phase: events.WorkloadPhase(clean(string(ws.Phase), MaxFieldLength)),
			Error: clean(ws.Error, MaxErrorLength), Time: e.Time}
	}
	out := make([]DeviceDeployment, 0, len(rows))
	for _, r := range rows {
		switch {
		case !r.Desired:
			r.State = TargetRemoved
		case r.Reported != nil && r.Reported.Generation == r.Generation && r.Reported.RevisionID == r.RevisionID:
			r.State = targetStateOf(r.Reported.Phase)
		default:
			r.State = TargetPending
		}
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b DeviceDeployment) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// timelineEntry converts a history entry, bounding what a device wrote.
func timelineEntry(e history.Entry) TimelineEntry {
	return TimelineEntry{Time: e.Time, Type: e.Type, Device: e.Device, Deployment: e.Deployment, Generation: e.Generation,
		Summary: clean(e.Summary, MaxErrorLength), Stage: e.Stage, Ignored: clean(e.Ignored, MaxFieldLength), Stream: e.Stream, Sequence: e.Sequence}
}

// Deployments implements Source.
func (v *View) Deployments(ctx context.Context) ([]DeploymentSummary, error) {
	deps, err := v.objs.deployments(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]DeploymentSummary, 0, len(deps))
	for i := range deps {
		out = append(out, deploymentSummary(&deps[i]))
	}
	slices.SortFunc(out, func(a, b DeploymentSummary) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// Deployment implements Source.
func (v *View) Deployment(ctx context.Context, namespace, name string) (DeploymentDetail, error) {
	if err := events.ValidateToken(events.TokenNamespace, namespace); err != nil {
		return DeploymentDetail{}, fmt.Errorf("%w: namespace: %w", ErrInvalidQuery, err)
	}
	if err := events.ValidateToken(events.TokenName, name); err != nil {
		return DeploymentDetail{}, fmt.Errorf("%w: name: %w", ErrInvalidQuery, err)
	}
	deps, err := v.objs.deployments(ctx)
	if err != nil {
		return DeploymentDetail{}, err
	}
	dd := DeploymentDetail{Devices: []TargetRow{}, Revisions: []RevisionRow{}, Timeline: []TimelineEntry{}, Services: []Service{}, Selector: []Label{}}
	inCache, crSaysHealth := false, false
	for i := range deps {
		d := &deps[i]
		if d.Namespace == namespace && d.Name == name {
			inCache = true
			dd.DeploymentSummary = deploymentSummary(d)
			crSaysHealth = hasCondition(d.Status.Conditions, fleetv1.ConditionDegraded)
			if p := d.Status.Plan; p != nil && d.Status.ObservedGeneration == d.Generation {
				dd.Plan = &PlanStage{Batch: int(p.Batch), Batches: int(p.Batches), AwaitingApproval: int(p.AwaitingApproval), Paused: p.Paused,
					PausedBy: clean(p.PausedBy, MaxFieldLength), PauseReason: clean(p.PauseReason, MaxErrorLength), RolledBackTo: p.RolledBackTo}
			}
			dd.Follow = followStageOf(d)
			for _, s := range d.Spec.Score.Data.Services {
				dd.Services = append(dd.Services, Service{Name: s.Name, Image: s.Image})
			}
			dd.Selector, _ = sortedLabels(d.Spec.TargetSelector.MatchLabels, MaxLabels)
			break
		}
	}
	tl, err := v.deploymentTimeline(ctx, namespace, name)
	switch {
	case errors.Is(err, history.ErrNoEvents):
		if !inCache {
			return DeploymentDetail{}, fmt.Errorf("Deployment %s/%s: %w: neither in the cache nor in the streams", namespace, name, ErrNotFound)
		}
		return dd, nil
	case err != nil:
		if ctx.Err() != nil {
			return DeploymentDetail{}, ctx.Err()
		}
		if !inCache {
			return DeploymentDetail{}, fmt.Errorf("Deployment %s/%s: %w", namespace, name, err)
		}
		v.o.Logger.Warn("Deployment timeline unreadable", "deployment", namespace+"/"+name, "err", err)
		dd.HistoryError = fmt.Sprintf("the Deployment's history could not be read from the streams: %v", err)
		return dd, nil
	}
	fillDeploymentHistory(&dd, tl, inCache)
	timelineHealth(&dd, tl, crSaysHealth)
	if tl.State != nil {
		dd.Progress = progressOf(tl.State, dd.Plan)
	}
	return dd, nil
}

// deploymentTimeline reads a Deployment's timeline, from the memo while
// the View follows the streams.
func (v *View) deploymentTimeline(ctx context.Context, namespace, name string) (*history.DeploymentTimeline, error) {
	if v.memo == nil || !v.following.Load() {
		return v.hist.Deployment(ctx, namespace, name)
	}
	return v.memo.deployment(ctx, namespace, name, v.o.Now(), v.hist.Deployment)
}

// fillDeploymentHistory fills the stream part of a Deployment page from its
// timeline: the rollout fold's stage and per-target results, the revisions.
// A Deployment only in the streams (deleted) gets its summary from the fold.
func fillDeploymentHistory(dd *DeploymentDetail, tl *history.DeploymentTimeline, inCache bool) {
	st := tl.State
	if !inCache {
		dd.Namespace, dd.Name, dd.Deleted = tl.Namespace, tl.Name, true
		if st != nil {
			dd.Phase, dd.Generation, dd.ObservedGeneration, dd.RevisionID = st.Phase, st.Generation, st.Generation, st.RevisionID
			dd.Targets = countsOf(st.Counts, 0)
			dd.ReadyReason, dd.ReadyMessage = st.Reason, clean(st.Message, MaxErrorLength)
			dd.Canary = st.Counts.Canaries > 0
			if f := st.LatestFailure; f != nil {
				dd.LatestFailure = &Failure{Device: f.Device, Error: clean(f.Error, MaxErrorLength), Time: f.Time}
			}
		}
	}
	var current *history.Revision
	for i := range tl.Revisions {
		r := &tl.Revisions[i]
		if st != nil && r.UID == st.UID && r.Generation == st.Generation {
			current = r
		}
	}
	if st != nil {
		dd.Stage, dd.StageSince = st.Stage, st.Since
		dd.CanaryStage = canaryStageOf(st.Stage, st.Counts)
	}
	for i := len(tl.Revisions) - 1; i >= 0; i-- {
		r := &tl.Revisions[i]
		row := RevisionRow{Generation: r.Generation, RevisionID: r.RevisionID, ScoreDigest: r.ScoreDigest, Targets: len(r.Targets),
			Canaries: len(r.Canaries), Created: r.Created, Current: r == current, AsOf: r.Created}
		for _, res := range r.Results {
			switch targetStateOf(res.Phase) {
			case TargetSucceeded:
				row.Succeeded++
			case TargetFailed:
				row.Failed++
			}
		}
		dd.Revisions = append(dd.Revisions, row)
	}
	if current != nil {
		rows := make([]TargetRow, 0, len(current.Results))
		for _, res := range current.Results {
			rows = append(rows, TargetRow{Device: res.Device, Canary: res.Canary, State: targetStateOf(res.Phase),
				Phase: events.WorkloadPhase(clean(string(res.Phase), MaxFieldLength)), Error: clean(res.Error, MaxErrorLength), Since: res.Since, Reports: res.Reports})
		}
		slices.SortFunc(rows, func(a, b TargetRow) int {
			return cmp.Or(cmp.Compare(stateRank[a.State], stateRank[b.State]), cmp.Compare(a.Device, b.Device))
		})
		if len(rows) > MaxTargetsShown {
			rows, dd.DevicesTruncated = rows[:MaxTargetsShown], true
		}
		dd.Devices = rows
	}
	dd.Timeline = newestFirst(tl.Entries, MaxTimeline, timelineEntry)
}

// FleetAt implements Source.
func (v *View) FleetAt(ctx context.Context, at time.Time) (FleetAt, error) {
	if at.IsZero() {
		return FleetAt{}, fmt.Errorf("%w: at is zero: give the instant to look at (RFC 3339)", ErrInvalidQuery)
	}
	if now := v.o.Now(); at.After(now) {
		return FleetAt{}, fmt.Errorf("%w: at %s is in the future: give a past instant", ErrInvalidQuery, at.UTC().Format(time.RFC3339))
	}
	fs, err := v.hist.FleetAt(ctx, at)
	if errors.Is(err, history.ErrNoEvents) {
		return FleetAt{At: at.UTC(), Devices: []FleetDevice{}, Deployments: []DeploymentAt{}, Positions: map[string]uint64{}}, nil
	}
	if err != nil {
		return FleetAt{}, fmt.Errorf("fleet at %s: %w", at.UTC().Format(time.RFC3339), err)
	}
	return fleetAtOf(fs), nil
}

// fleetAtOf converts the history package's fleet state.
func fleetAtOf(fs *history.FleetState) FleetAt {
	out := FleetAt{At: fs.At, Positions: fs.Positions, Devices: make([]FleetDevice, 0, len(fs.Devices)), Deployments: make([]DeploymentAt, 0, len(fs.Deployments))}
	for _, d := range fs.Devices {
		fd := FleetDevice{Device: d.Device, Desired: []string{}, Reported: []DeploymentReport{}}
		for _, in := range d.Desired {
			fd.Desired = append(fd.Desired, fmt.Sprintf("%s/%s@%d", in.Namespace, in.Name, in.Generation))
		}
		for _, r := range d.Reported {
			fd.Reported = append(fd.Reported, DeploymentReport{Deployment: r.Namespace + "/" + r.Deployment,
				WorkloadReport: WorkloadReport{Generation: r.Generation, RevisionID: clean(r.RevisionID, MaxFieldLength),
					Phase: events.WorkloadPhase(clean(string(r.Phase), MaxFieldLength)), Error: clean(r.Error, MaxErrorLength), Time: r.Stored}})
		}
		out.Devices = append(out.Devices, fd)
	}
	for _, s := range fs.Deployments {
		da := DeploymentAt{Namespace: s.Namespace, Name: s.Name, Generation: s.Generation, RevisionID: s.RevisionID, Phase: s.Phase,
			Stage: s.Stage, Targets: countsOf(s.Counts, 0), Deleted: s.Deleted}
		if f := s.LatestFailure; f != nil {
			da.LatestFailure = &Failure{Device: f.Device, Error: clean(f.Error, MaxErrorLength), Time: f.Time}
		}
		out.Deployments = append(out.Deployments, da)
	}
	return out
}

// TaskRuns implements Source.
func (v *View) TaskRuns(ctx context.Context) ([]TaskRunSummary, error) {
	trs, err := v.objs.taskRuns(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TaskRunSummary, 0, len(trs))
	for i := range trs {
		out = append(out, taskRunSummary(&trs[i]))
	}
	slices.SortFunc(out, func(a, b TaskRunSummary) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// taskRunSummary is the list row of t, from its status.
func taskRunSummary(t *fleetv1.TaskRun) TaskRunSummary {
	s := TaskRunSummary{Namespace: t.Namespace, Name: t.Name, Task: string(t.Spec.Task), Phase: string(t.Status.Phase),
		Targets: int(t.Status.Counts.Targets), Pending: int(t.Status.Counts.Pending), Running: int(t.Status.Counts.Running),
		Succeeded: int(t.Status.Counts.Succeeded), Failed: int(t.Status.Counts.Failed), Created: t.CreationTimestamp.UTC()}
	if a := t.Spec.Agent; a != nil {
		s.AgentVersion = a.Version
	}
	if w := t.Spec.MaintenanceWindow; w != nil {
		s.Window = w.Start + " for " + w.Duration
	}
	if f := t.Status.LatestFailure; f != nil {
		s.LatestFailure = &Failure{Device: f.Device, Error: clean(f.Message, MaxErrorLength), Time: f.Time.UTC()}
	}
	return s
}

// taskResults converts per-device results, bounding what devices wrote.
func taskResults(rs []fleetv1.TaskDeviceResult) []TaskResult {
	out := make([]TaskResult, 0, len(rs))
	for _, r := range rs {
		tr := TaskResult{Device: r.Device, Phase: clean(r.Phase, MaxFieldLength), Message: clean(r.Message, MaxErrorLength),
			AgentVersion: clean(r.AgentVersion, MaxFieldLength), ChangedPackages: int(r.ChangedPackages)}
		if r.Since != nil {
			tr.Since = r.Since.UTC()
		}
		out = append(out, tr)
	}
	slices.SortFunc(out, func(a, b TaskResult) int { return cmp.Compare(a.Device, b.Device) })
	return out
}

// TaskRun implements Source.
func (v *View) TaskRun(ctx context.Context, namespace, name string) (TaskRunDetail, error) {
	if err := events.ValidateToken(events.TokenNamespace, namespace); err != nil {
		return TaskRunDetail{}, fmt.Errorf("%w: namespace: %w", ErrInvalidQuery, err)
	}
	if err := events.ValidateToken(events.TokenName, name); err != nil {
		return TaskRunDetail{}, fmt.Errorf("%w: name: %w", ErrInvalidQuery, err)
	}
	trs, err := v.objs.taskRuns(ctx)
	if err != nil {
		return TaskRunDetail{}, err
	}
	var t *fleetv1.TaskRun
	for i := range trs {
		if trs[i].Namespace == namespace && trs[i].Name == name {
			t = &trs[i]
			break
		}
	}
	if t == nil {
		return TaskRunDetail{}, fmt.Errorf("TaskRun %s/%s: %w in the cache", namespace, name, ErrNotFound)
	}
	td := TaskRunDetail{TaskRunSummary: taskRunSummary(t), Results: taskResults(t.Status.Results), Timeline: []TimelineEntry{}}
	td.Selector, _ = sortedLabels(t.Spec.TargetSelector.MatchLabels, MaxLabels)
	tl, err := v.hist.TaskRun(ctx, namespace, name)
	switch {
	case errors.Is(err, history.ErrNoEvents):
		return td, nil
	case err != nil:
		if ctx.Err() != nil {
			return TaskRunDetail{}, ctx.Err()
		}
		td.HistoryError = fmt.Sprintf("the TaskRun's history could not be read from the streams: %v", err)
		return td, nil
	}
	if tl.UID == string(t.UID) || tl.UID == "" {
		td.Results = taskResults(tl.Results)
	}
	td.Timeline = newestFirst(tl.Entries, MaxTimeline, timelineEntry)
	return td, nil
}

// Alerts implements Source.
func (v *View) Alerts(ctx context.Context) ([]Alert, error) {
	devs, deps, trs, err := v.all(ctx)
	if err != nil {
		return nil, err
	}
	return deriveAlerts(devs, deps, trs, v.o.Now(), v.grace()), nil
}

// grace is the durations of the View's alerts.
func (v *View) grace() grace {
	return grace{offlineAfter: v.o.OfflineAfter, neverConnectedAfter: v.o.NeverConnectedAfter}
}
