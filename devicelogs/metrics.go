package devicelogs

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric names.
const (
	MetricCutOffs     = "fleet_devicelogs_cutoffs_total"
	MetricOpenStreams = "fleet_devicelogs_open_streams"
)

// Metrics count what a Reader cut off and holds open; labels never name a
// device. A nil *Metrics records nothing.
type Metrics struct {
	cutoffs *prometheus.CounterVec
	open    prometheus.Gauge
}

// NewMetrics returns the metrics at zero, a series for every reason.
func NewMetrics() *Metrics {
	m := &Metrics{
		cutoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricCutOffs,
			Help: "Log streams a device's answer cut off, by reason (size, decode, sequence, bytes, rate, unrequested)."}, []string{"reason"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricOpenStreams, Help: "Device log streams open."}),
	}
	for _, r := range reasons {
		m.cutoffs.WithLabelValues(r)
	}
	return m
}

// Collectors returns the collectors to register (none for nil).
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.cutoffs, m.open}
}

func (m *Metrics) cutOff(reason string) {
	if m != nil {
		m.cutoffs.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) opened(delta float64) {
	if m != nil {
		m.open.Add(delta)
	}
}

// CutOffs returns the count of reason (tests, fleet logs' summary).
func (m *Metrics) CutOffs(reason string) float64 {
	if m == nil {
		return 0
	}
	var out float64
	c := m.cutoffs.WithLabelValues(reason)
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	pm := <-ch
	var d dto.Metric
	if err := pm.Write(&d); err == nil && d.Counter != nil {
		out = d.Counter.GetValue()
	}
	return out
}
