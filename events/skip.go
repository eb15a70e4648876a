package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// SkippedRecordsMetric is the name of the counter of skipped records.
const SkippedRecordsMetric = "fleet_events_skipped_records_total"

// SkipCounter counts the stored records readers skip because they do not
// decode (fleet_events_skipped_records_total{stream,reason}). It registers
// with no registry by itself: a binary registers Collector with its own (the
// operator with controller-runtime's metrics registry). A nil *SkipCounter
// is valid and counts nothing, so readers take one as an optional field.
// It is safe for concurrent use.
type SkipCounter struct {
	vec *prometheus.CounterVec

	mu     sync.Mutex                  // guards logged
	logged map[[2]string]*skipLogState // by stream and reason
}

// skipLogState is when a (stream, reason) was last logged and how many
// records were skipped since without a line of their own.
type skipLogState struct {
	at         time.Time
	suppressed int
}

// SkipLogInterval is the least time between two warning lines for one
// stream and reason: a flooding device's garbage costs one line per
// interval, not one per record (the counter counts every record).
const SkipLogInterval = 10 * time.Second

// NewSkipCounter returns a counter at zero.
func NewSkipCounter() *SkipCounter {
	return &SkipCounter{vec: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: SkippedRecordsMetric,
		Help: "Stored event records a reader skipped because they do not decode (not an envelope, unknown type, " +
			"unsupported version, invalid envelope, keys that disagree with the subject, invalid data), by stream and reason.",
	}, []string{"stream", "reason"})}
}

// Collector returns the Prometheus collector to register; nil for a nil
// counter.
func (c *SkipCounter) Collector() prometheus.Collector {
	if c == nil {
		return nil
	}
	return c.vec
}

// Count adds one skipped record of stream for reason. Nil-safe.
func (c *SkipCounter) Count(stream string, reason SkipReason) {
	if c == nil {
		return
	}
	c.vec.WithLabelValues(stream, string(reason)).Inc()
}

// Skip counts e and logs it at warning level on log (nil: not logged),
// naming the stream, subject, sequence, reason and size of the record, never
// its payload. Either c or log may be nil.
func (c *SkipCounter) Skip(ctx context.Context, log *slog.Logger, e *RecordError) {
	if e == nil {
		return
	}
	c.Count(e.Stream, e.Reason)
	if log == nil {
		return
	}
	suppressed, ok := c.shouldLog(e.Stream, e.Reason)
	if !ok {
		return
	}
	log.WarnContext(ctx, "undecodable record skipped", "stream", e.Stream, "subject", e.Subject, "seq", e.Sequence,
		"reason", string(e.Reason), "bytes", e.Size, "error", e.Err, "skipped_since_last_line", suppressed)
}

// shouldLog rate-limits the warning lines of one stream and reason to one
// per SkipLogInterval; it returns how many records were skipped without a
// line since the last one. A nil counter logs every record.
func (c *SkipCounter) shouldLog(stream string, reason SkipReason) (int, bool) {
	if c == nil {
		return 0, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logged == nil {
		c.logged = map[[2]string]*skipLogState{}
	}
	k := [2]string{stream, string(reason)}
	st := c.logged[k]
	now := time.Now()
	if st == nil {
		c.logged[k] = &skipLogState{at: now}
		return 0, true
	}
	if now.Sub(st.at) < SkipLogInterval {
		st.suppressed++
		return 0, false
	}
	n := st.suppressed
	st.at, st.suppressed = now, 0
	return n, true
}

// Skipped returns how many records of stream were counted for reason; with
// reason "", for every reason. Nil-safe (0).
func (c *SkipCounter) Skipped(stream string, reason SkipReason) uint64 {
	if c == nil {
		return 0
	}
	ch := make(chan prometheus.Metric)
	go func() {
		c.vec.Collect(ch)
		close(ch)
	}()
	var n uint64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["stream"] == stream && (reason == "" || labels["reason"] == string(reason)) {
			n += uint64(d.GetCounter().GetValue())
		}
	}
	return n
}
