package fleetview

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// TrendHours is the length of the trend.
const TrendHours = 24

// trendCounter counts heartbeats, reports and failures per hour of their
// stored time.
//
// What it can and cannot reconstruct after a restart of the dashboard:
//
//   - reports and failures (FLEET_REPORTS: workload, task and command
//     reports) are history: the stream keeps them, so on start the View
//     replays the last 24 hours and the counts are exact whatever the
//     restarts (within the stream's retention);
//   - heartbeats (FLEET_LIVENESS, soft state in memory, ADR 0024) are
//     not: the stream keeps only the last one per device, so on start the
//     View counts what it still holds and from then on every heartbeat as
//     it arrives. Hours that started before the View's start
//     (HeartbeatsSince) undercount, and are marked HeartbeatsPartial; a
//     heartbeat sent while the View was down is lost to the trend unless
//     it is still its device's last.
type trendCounter struct {
	mu         sync.Mutex // guards the fields below
	heartbeats map[int64]int
	reports    map[int64]int
	failures   map[int64]int
	// since is when the live heartbeat count started (zero: not yet).
	since time.Time
}

func newTrendCounter() *trendCounter {
	return &trendCounter{heartbeats: map[int64]int{}, reports: map[int64]int{}, failures: map[int64]int{}}
}

// hourOf is the bucket of t: the Unix time of its hour's start.
func hourOf(t time.Time) int64 { return t.UTC().Truncate(time.Hour).Unix() }

// heartbeat counts one heartbeat stored at t.
func (c *trendCounter) heartbeat(t time.Time) {
	c.mu.Lock()
	c.heartbeats[hourOf(t)]++
	c.mu.Unlock()
}

// report counts one report stored at t.
func (c *trendCounter) report(t time.Time, failed bool) {
	c.mu.Lock()
	h := hourOf(t)
	c.reports[h]++
	if failed {
		c.failures[h]++
	}
	c.mu.Unlock()
}

// startLive records when the live heartbeat count started.
func (c *trendCounter) startLive(t time.Time) {
	c.mu.Lock()
	if c.since.IsZero() {
		c.since = t.UTC()
	}
	c.mu.Unlock()
}

// trend returns the 24 hours ending with now's hour, and forgets older
// buckets.
func (c *trendCounter) trend(now time.Time) Trend {
	c.mu.Lock()
	defer c.mu.Unlock()
	first := now.UTC().Truncate(time.Hour).Add(-(TrendHours - 1) * time.Hour)
	for _, m := range []map[int64]int{c.heartbeats, c.reports, c.failures} {
		for h := range m {
			if h < first.Unix() {
				delete(m, h)
			}
		}
	}
	t := Trend{HeartbeatsSince: c.since, Hours: make([]TrendHour, 0, TrendHours)}
	for i := range TrendHours {
		start := first.Add(time.Duration(i) * time.Hour)
		h := start.Unix()
		t.Hours = append(t.Hours, TrendHour{Start: start, Heartbeats: c.heartbeats[h], Reports: c.reports[h], Failures: c.failures[h],
			HeartbeatsPartial: c.since.IsZero() || start.Before(c.since)})
	}
	return t
}

// Trend implements Source.
func (v *View) Trend(ctx context.Context) (Trend, error) {
	if err := ctx.Err(); err != nil {
		return Trend{}, err
	}
	return v.trend.trend(v.o.Now()), nil
}

// reportFailed reports whether a report record says something failed. err
// is the data's decoding error: such a report is not counted.
func reportFailed(rec events.Record) (failed bool, err error) {
	switch rec.Event.Type {
	case events.TypeWorkloadStatus:
		d, err := events.Decode[events.WorkloadStatus](rec.Event)
		return err == nil && d.Phase == events.WorkloadFailed, err
	case events.TypeTaskStatus:
		d, err := events.Decode[events.TaskStatus](rec.Event)
		return err == nil && d.Phase == events.TaskFailed, err
	case events.TypeCommandResult:
		d, err := events.Decode[events.CommandResult](rec.Event)
		return err == nil && !d.OK, err
	}
	return false, fmt.Errorf("%w: %s is not a report the trend counts", events.ErrUnknownType, rec.Event.Type)
}
