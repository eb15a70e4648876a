package deployments

import "github.com/prometheus/client_golang/prometheus"

// MetricRevisions counts the revisions the Deployment controller tried to
// append, by result.
const MetricRevisions = "fleet_operator_revisions_total"

// Metrics are the Deployment role's Prometheus metrics
// (fleet_operator_revisions_total). A nil *Metrics records nothing. Safe
// for concurrent use.
type Metrics struct {
	revisions *prometheus.CounterVec
}

// NewMetrics returns the Deployment role's metrics at zero, every result
// pre-created.
func NewMetrics() *Metrics {
	m := &Metrics{
		revisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRevisions,
			Help: "Deployment revisions the Deployment controller tried to append, by result: appended, conflict (another writer appended first; re-read), failed."},
			[]string{"result"}),
	}
	for _, r := range []string{"appended", "conflict", "failed"} {
		m.revisions.WithLabelValues(r)
	}
	return m
}

// Collectors returns the collectors to register (none of a nil *Metrics).
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.revisions}
}

func (m *Metrics) revision(result string) {
	if m != nil {
		m.revisions.WithLabelValues(result).Inc()
	}
}
