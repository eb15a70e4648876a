package agent

import "github.com/prometheus/client_golang/prometheus"

// Metric names of the monitor (docs/metrics.md lists them).
const (
	MetricContainerDeaths     = "fleet_agent_container_deaths_total"
	MetricDegradedDeployments = "fleet_agent_degraded_deployments"
	MetricHealthReports       = "fleet_agent_health_reports_total"
	MetricWatchMode           = "fleet_agent_watch_mode"
)

// healthMetrics are the monitor's metrics (ADR 0019, A.9).
type healthMetrics struct {
	deaths    *prometheus.CounterVec
	degradedG prometheus.Gauge
	reports   *prometheus.CounterVec
	mode      *prometheus.GaugeVec
}

func newHealthMetrics(constLabels prometheus.Labels) *healthMetrics {
	h := &healthMetrics{
		deaths: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricContainerDeaths, ConstLabels: constLabels,
			Help: "Deaths of the services the agent watches that the agent did not cause, by reason: exit, signal (exit code 128+n) or oom."},
			[]string{"reason"}),
		degradedG: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricDegradedDeployments, ConstLabels: constLabels,
			Help: "Deployments this device reports Degraded now."}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricHealthReports, ConstLabels: constLabels,
			Help: "Health reports, by type: degraded and recovered sent, coalesced (held back by the device's budget and replaced by a later state)."},
			[]string{"type"}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricWatchMode, ConstLabels: constLabels,
			Help: "How the agent learns of its containers' deaths: 1 for the current mode, events (the engine's event stream, with a slow poll) or poll (every 10 s)."},
			[]string{"mode"}),
	}
	for _, r := range []string{"exit", "signal", "oom"} {
		h.deaths.WithLabelValues(r)
	}
	for _, t := range []string{"degraded", "recovered", "coalesced"} {
		h.reports.WithLabelValues(t)
	}
	for _, mo := range []string{watchEvents, watchPoll} {
		h.mode.WithLabelValues(mo)
	}
	return h
}

func (h *healthMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{h.deaths, h.degradedG, h.reports, h.mode}
}

// containerDied counts a death of a watched service by reason.
func (m *Metrics) containerDied(reason string) {
	if m != nil {
		m.health.deaths.WithLabelValues(reason).Inc()
	}
}

// degraded sets the number of Degraded Deployments.
func (m *Metrics) degraded(n int) {
	if m != nil {
		m.health.degradedG.Set(float64(n))
	}
}

// healthReports counts n health reports of type t.
func (m *Metrics) healthReports(t string, n int) {
	if m != nil && n > 0 {
		m.health.reports.WithLabelValues(t).Add(float64(n))
	}
}

// watchMode sets the monitor's mode.
func (m *Metrics) watchMode(mode string) {
	if m != nil {
		for _, mo := range []string{watchEvents, watchPoll} {
			v := 0.0
			if mo == mode {
				v = 1
			}
			m.health.mode.WithLabelValues(mo).Set(v)
		}
	}
}
