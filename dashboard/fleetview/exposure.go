package fleetview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
)

// exposer answers the recall list. *history.History and the mock
// implement it.
type exposer interface {
	Exposure(ctx context.Context, q history.ExposureQuery) (*history.Exposure, error)
}

// Exposure is `fleet history exposure` for the dashboard's search page:
// every device that ran a revision the query matches, and when (ADR 0021).
// An invalid query is ErrInvalidQuery naming the field; a query no
// revision matches is ErrNotFound.
func (v *View) Exposure(ctx context.Context, q history.ExposureQuery) (*history.Exposure, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidQuery, err)
	}
	ex, ok := v.hist.(exposer)
	if !ok {
		return nil, fmt.Errorf("%w: this view cannot answer exposure questions", ErrNotFound)
	}
	e, err := ex.Exposure(ctx, q)
	if errors.Is(err, history.ErrNoEvents) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return nil, fmt.Errorf("exposure: %w", err)
	}
	return e, nil
}

// Exposure implements exposer for the mock: every device's current report
// of a Deployment whose score matches, as one interval still running since
// the report (the mock keeps no earlier revision).
func (m *mockFleet) Exposure(_ context.Context, q history.ExposureQuery) (*history.Exposure, error) {
	now := time.Now().UTC()
	out := &history.Exposure{Query: q, AsOf: now, Revisions: []history.ExposedRevision{}, Intervals: []history.ExposureInterval{}}
	matched := map[string]bool{}
	for _, dep := range m.deps {
		key := dep.Namespace + "/" + dep.Name
		if q.Deployment != "" && q.Deployment != key {
			continue
		}
		var images []string
		for _, s := range dep.Spec.Score.Data.Services {
			if ok, err := history.MatchImage(q.Image, s.Image); q.Image == "" || (err == nil && ok) {
				images = append(images, s.Image)
			}
		}
		if len(images) == 0 {
			continue
		}
		matched[key] = true
		out.Revisions = append(out.Revisions, history.ExposedRevision{Deployment: key, UID: string(dep.UID), Generation: dep.Generation,
			Created: dep.CreationTimestamp.UTC(), Images: images})
	}
	if len(matched) == 0 {
		return nil, fmt.Errorf("%w for image %s", history.ErrNoEvents, q.Image)
	}
	devices := map[string]bool{}
	for _, d := range m.devs {
		for _, r := range m.results[d.Name] {
			if !matched[r.Namespace+"/"+r.Deployment] {
				continue
			}
			iv := history.ExposureInterval{Device: d.Name, Deployment: r.Namespace + "/" + r.Deployment, UID: r.UID, Generation: r.Generation,
				RevisionID: r.RevisionID, Role: history.RoleTarget, Since: r.Since.UTC(), End: history.EndRunning, LastPhase: r.Phase,
				Failed: r.Phase == events.WorkloadFailed, Hours: max(now.Sub(r.Since).Hours(), 0)}
			if r.Phase == events.WorkloadConverged {
				iv.Converged = r.Since.UTC()
			}
			out.Intervals = append(out.Intervals, iv)
			out.DeviceHours += iv.Hours
			out.Running++
			devices[d.Name] = true
		}
	}
	slices.SortFunc(out.Intervals, func(a, b history.ExposureInterval) int {
		if a.Device != b.Device {
			if a.Device < b.Device {
				return -1
			}
			return 1
		}
		return a.Since.Compare(b.Since)
	})
	out.Devices = len(devices)
	return out, nil
}
