package history

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// FleetState is the fleet as it was at a time: every event the server had
// stored at At, folded by the projections.
type FleetState struct {
	At time.Time `json:"at"`
	// Positions is the last stream sequence folded, per stream (absent: no
	// event of that stream yet).
	Positions map[string]uint64 `json:"positions"`
	// Devices: every device with a desired state, a workload report, or a
	// place in a current revision's frozen targets; sorted.
	Devices []DeviceState `json:"devices"`
	// Deployments: every Deployment with a revision, sorted by namespace
	// and name; deleted ones included (Deleted set).
	Deployments []RolloutState `json:"deployments"`
	// DegradedDevices counts the devices that reported the current
	// revision of a Deployment Degraded and had not recovered then.
	DegradedDevices int `json:"degradedDevices"`
}

// DeviceState is one device at a time: what it should run and what it
// last said it runs.
type DeviceState struct {
	Device string `json:"device"`
	// Desired is the device's fleet-intent value at the time as the intent
	// projection folds it (empty: no key).
	Desired []events.IntentEntry `json:"desired"`
	// Reported is the device's latest workload report per Deployment, sorted
	// by namespace and name.
	Reported []Report `json:"reported"`
	// Degraded are the Deployments it reported Degraded and had not
	// recovered then (of their current revision), sorted.
	Degraded []HealthState `json:"degraded,omitempty"`
}

// Report is one workload report.
type Report struct {
	Namespace  string               `json:"namespace"`
	Deployment string               `json:"deployment"`
	UID        string               `json:"uid"`
	Generation int64                `json:"generation"`
	RevisionID string               `json:"revisionId"`
	Phase      events.WorkloadPhase `json:"phase"`
	Error      string               `json:"error,omitempty"`
	Since      time.Time            `json:"since"`
	// Stored is when the stream stored the report; ID is its event id.
	Stored time.Time `json:"stored"`
	ID     string    `json:"id"`
}

// FleetAt returns the fleet as it was at t: it replays the intent, rollout,
// workload-report and health-report streams from their first event and stops each at its
// first event stored after t, folding them with the projections (the
// operator's rollout fold and intent fold). ErrNoEvents when nothing was
// stored at or before t.
func (h *History) FleetAt(ctx context.Context, t time.Time) (*FleetState, error) {
	if t.IsZero() {
		return nil, fmt.Errorf("history of the fleet: the time is zero: give the instant to look at")
	}
	recs, err := h.collect(ctx, t,
		read{filter: filterDeploymentIntent, from: events.FromStart()},
		read{filter: filterRollouts, from: events.FromStart()},
		read{filter: filterWorkload, from: events.FromStart()},
		read{filter: filterHealth, from: events.FromStart()})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%w at or before %s: the Fleet streams were empty then; give a later --at",
			ErrNoEvents, t.UTC().Format(time.RFC3339Nano))
	}
	fs := &FleetState{At: t.UTC(), Positions: map[string]uint64{}, Devices: []DeviceState{}, Deployments: []RolloutState{}}
	intent := projections.NewIntent()
	rollouts := map[events.Keys]projections.Rollout{}
	reported := map[string]map[events.Keys]Report{}
	health := newHealthFold() // keyed by device and Deployment
	for _, rec := range recs {
		fs.Positions[rec.Stream] = max(fs.Positions[rec.Stream], rec.Sequence)
		if isHealth(rec.Event.Type) {
			h.foldHealth(ctx, health, rollouts, rec)
			continue
		}
		k := rec.Event.Keys
		// Decoded once: to find a report's Deployment and to fold it.
		p := projections.NewPayload(rec.Event)
		if rec.Event.Type == events.TypeWorkloadStatus {
			d, err := p.WorkloadStatus()
			if err != nil {
				h.skipData(ctx, rec, err)
				continue
			}
			k = events.Keys{Namespace: d.Namespace, Name: d.Deployment}
			dev := rec.Event.Keys.Device
			if reported[dev] == nil {
				reported[dev] = map[events.Keys]Report{}
			}
			// The latest in stream order, as the rollout projection keeps
			// it (never by the device's clock).
			reported[dev][k] = Report{Namespace: d.Namespace, Deployment: d.Deployment, UID: d.UID, Generation: d.Generation,
				RevisionID: d.RevisionID, Phase: d.Phase, Error: d.Error, Since: d.Since.UTC(), Stored: rec.Stored.UTC(), ID: rec.Event.ID.String()}
			health.moveOn(dev+" "+d.Namespace+"/"+d.Deployment, d)
		} else {
			intent.ApplyPayload(&p)
		}
		ro := rollouts[k] // the only copy: folded in place (O(1) a report)
		ro.FoldPayload(&p)
		rollouts[k] = ro
		health.supersededIn(rec, k.Namespace+"/"+k.Name, ro)
	}
	degraded := map[string][]HealthState{}
	for _, s := range health.list() {
		degraded[s.Device] = append(degraded[s.Device], s)
	}
	fs.DegradedDevices = len(degraded)

	devices := map[string]bool{}
	for _, d := range intent.Devices() {
		devices[d] = true
	}
	for d := range reported {
		devices[d] = true
	}
	for _, k := range slices.SortedFunc(maps.Keys(rollouts), compareKeys) {
		st, ok := stateOf(k.Namespace, k.Name, rollouts[k])
		if !ok {
			continue
		}
		fs.Deployments = append(fs.Deployments, st)
		if !st.Deleted {
			for _, d := range st.Targets {
				devices[d] = true
			}
		}
	}
	for _, dev := range slices.Sorted(maps.Keys(devices)) {
		ds := DeviceState{Device: dev, Desired: []events.IntentEntry{}, Reported: []Report{}}
		if v, ok := intent.Value(dev); ok {
			var di events.DeviceIntent
			if err := json.Unmarshal(v, &di); err != nil {
				return nil, fmt.Errorf("history of the fleet: decode intent of %s: %w", dev, err)
			}
			ds.Desired = di.Deployments
		}
		for _, k := range slices.SortedFunc(maps.Keys(reported[dev]), compareKeys) {
			ds.Reported = append(ds.Reported, reported[dev][k])
		}
		ds.Degraded = degraded[dev]
		fs.Devices = append(fs.Devices, ds)
	}
	return fs, nil
}

func compareKeys(a, b events.Keys) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// foldHealth folds a health report into the fleet's Degraded states: only
// a report of a Deployment's current revision by one of its frozen targets
// counts (rollouts: the folds so far); a re-sent copy changes nothing.
func (h *History) foldHealth(ctx context.Context, health *healthFold, rollouts map[events.Keys]projections.Rollout, rec events.Record) {
	k, d, ok := healthKey(rec)
	if !ok {
		_, err := events.Decode[events.WorkloadHealth](rec.Event)
		h.skipData(ctx, rec, err)
		return
	}
	dev := rec.Event.Keys.Device
	key := dev + " " + k.Namespace + "/" + k.Name
	if ignoredHealth(rollouts[k], dev, d) != "" || health.resent(key, rec) {
		return
	}
	health.apply(key, rec, d, dev+" "+healthText(rec.Event.Type, d))
}
