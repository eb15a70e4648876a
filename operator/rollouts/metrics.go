package rollouts

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Metrics are the rollout role's Prometheus metrics (fleet_rollout_*,
// fleet_rollouts, fleet_deployment_degraded_devices): what the rollout
// runner folds, appends and writes. Labels are bounded: by Deployment at
// most, never by device. A nil *Metrics records nothing. Safe for
// concurrent use.
type Metrics struct {
	transitions  *prometheus.CounterVec
	durations    *prometheus.HistogramVec
	started      *prometheus.GaugeVec
	deadlines    *prometheus.GaugeVec
	degraded     *prometheus.GaugeVec
	phases       *prometheus.GaugeVec
	reports      *prometheus.CounterVec
	intentWrites *prometheus.CounterVec
	statusWrites *prometheus.CounterVec
	live         prometheus.Gauge
	// checkpointAt is the unix nanoseconds of the last checkpoint written
	// (or of the runner's start, before the first); 0: no checkpoints.
	checkpointAt atomic.Int64
	checkpoint   prometheus.GaugeFunc
}

// Metric names of the rollout role the alert rules and the docs use.
const (
	MetricRolloutTransitions = "fleet_rollout_transitions_total"
	MetricRolloutDuration    = "fleet_rollout_duration_seconds"
	MetricRolloutStarted     = "fleet_rollout_started_timestamp_seconds"
	MetricRolloutDeadline    = "fleet_rollout_progress_deadline_exceeded"
	MetricRollouts           = "fleet_rollouts"
	// MetricDeploymentDegraded is how many devices report a Deployment
	// degraded (ADR 0019); never labelled by device.
	MetricDeploymentDegraded  = "fleet_deployment_degraded_devices"
	MetricRunnerReports       = "fleet_rollout_runner_reports_total"
	MetricRunnerIntentWrites  = "fleet_rollout_runner_intent_writes_total"
	MetricRunnerStatusWrites  = "fleet_rollout_runner_status_writes_total"
	MetricRunnerLive          = "fleet_rollout_runner_live"
	MetricRunnerCheckpointAge = "fleet_rollout_runner_checkpoint_age_seconds"
)

// NewMetrics returns the rollout role's metrics at zero, every phase
// pre-created.
func NewMetrics() *Metrics {
	m := &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRolloutTransitions,
			Help: "Rollout transitions this replica's rollout runner appended, by Deployment and event type (rollout.started … rollout.succeeded, rollout.failed)."},
			[]string{"namespace", "deployment", "type"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricRolloutDuration,
			Help:    "Time from a revision's event to its rollout's end (rollout.succeeded or rollout.failed appended by this replica), by Deployment and result.",
			Buckets: []float64{0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600}},
			[]string{"namespace", "deployment", "result"}),
		started: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRolloutStarted,
			Help: "Unix time of the revision event of each rollout in progress (a series exists only while its rollout is neither succeeded nor failed)."},
			[]string{"namespace", "deployment"}),
		deadlines: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRolloutDeadline,
			Help: "1 while a Deployment's rollout has made no progress within its progress deadline (its Progressing condition is False, reason ProgressDeadlineExceeded); the series exists only then."},
			[]string{"namespace", "deployment"}),
		degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricDeploymentDegraded,
			Help: "Devices that report a Deployment degraded (a service crash-looping, OOM-killed, down or unhealthy after it converged): its status.counts.degraded. A series exists for every Deployment with a status; it is deleted with the Deployment."},
			[]string{"namespace", "deployment"}),
		phases: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricRollouts,
			Help: "Deployments by the phase of their current revision's rollout, as the rollout runner folds them."},
			[]string{"phase"}),
		reports: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRunnerReports,
			Help: "Workload and health reports the rollout runner read, by outcome: folded, or dropped (reports about unknown Deployments or revisions once live past a bound; health reports from a device that does not hold the revision they name)."},
			[]string{"outcome"}),
		intentWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRunnerIntentWrites,
			Help: "Writes of devices' fleet-intent values by the rollout runner, by operation (put, delete) and result (ok, error)."},
			[]string{"op", "result"}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRunnerStatusWrites,
			Help: "Deployment status writes by the rollout runner, by result (ok, error)."},
			[]string{"result"}),
		live: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricRunnerLive,
			Help: "1 once the rollout runner has caught up with the streams and decides live; 0 while it rebuilds."}),
	}
	m.checkpoint = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricRunnerCheckpointAge,
		Help: "Seconds since the rollout runner last wrote its checkpoint (since it started, before the first); 0 when it keeps none."},
		func() float64 {
			at := m.checkpointAt.Load()
			if at == 0 {
				return 0
			}
			return time.Since(time.Unix(0, at)).Seconds()
		})
	for _, p := range []fleetv1.DeploymentPhase{fleetv1.PhasePending, fleetv1.PhaseCanary, fleetv1.PhaseProgressing, fleetv1.PhaseSucceeded, fleetv1.PhaseFailed} {
		m.phases.WithLabelValues(string(p))
	}
	return m
}

// Collectors returns the collectors to register (none of a nil *Metrics).
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.transitions, m.durations, m.started, m.deadlines, m.degraded, m.phases, m.reports,
		m.intentWrites, m.statusWrites, m.live, m.checkpoint}
}

func (m *Metrics) transition(k depKey, typ string) {
	if m != nil {
		m.transitions.WithLabelValues(k.ns, k.name, typ).Inc()
	}
}

func (m *Metrics) rolloutEnded(k depKey, result string, took time.Duration) {
	if m != nil {
		m.durations.WithLabelValues(k.ns, k.name, result).Observe(took.Seconds())
	}
}

// progressDeadline sets Deployment k's gauge while its rollout exceeded
// its progress deadline and deletes it otherwise.
func (m *Metrics) progressDeadline(k depKey, exceeded bool) {
	if m == nil {
		return
	}
	if exceeded {
		m.deadlines.WithLabelValues(k.ns, k.name).Set(1)
		return
	}
	m.deadlines.DeleteLabelValues(k.ns, k.name)
}

// degradedDevices sets Deployment k's degraded device count; a negative n
// deletes its series (the Deployment is gone).
func (m *Metrics) degradedDevices(k depKey, n int) {
	if m == nil {
		return
	}
	if n < 0 {
		m.degraded.DeleteLabelValues(k.ns, k.name)
		return
	}
	m.degraded.WithLabelValues(k.ns, k.name).Set(float64(n))
}

func (m *Metrics) report(outcome string) {
	if m != nil {
		m.reports.WithLabelValues(outcome).Inc()
	}
}

func (m *Metrics) intentWrite(op string, err error) {
	if m != nil {
		m.intentWrites.WithLabelValues(op, result(err)).Inc()
	}
}

func (m *Metrics) statusWrite(err error) {
	if m != nil {
		m.statusWrites.WithLabelValues(result(err)).Inc()
	}
}

func (m *Metrics) setLive(live bool) {
	if m != nil {
		m.live.Set(b2f(live))
	}
}

// checkpointed records a checkpoint written (or the runner's start) at t.
func (m *Metrics) checkpointed(t time.Time) {
	if m != nil {
		m.checkpointAt.Store(t.UnixNano())
	}
}

// rolloutGauges sets the phase counts and the started times of the
// rollouts in progress from the fold.
func (m *Metrics) rolloutGauges(s *runnerState) {
	if m == nil {
		return
	}
	counts := map[fleetv1.DeploymentPhase]int{fleetv1.PhasePending: 0, fleetv1.PhaseCanary: 0, fleetv1.PhaseProgressing: 0,
		fleetv1.PhaseSucceeded: 0, fleetv1.PhaseFailed: 0}
	for k, ro := range s.rollouts {
		st, ok := ro.Status()
		inProgress := ok && !ro.Deleted && st.Phase != fleetv1.PhaseSucceeded && st.Phase != fleetv1.PhaseFailed
		if ok && !ro.Deleted {
			counts[st.Phase]++
		}
		at, known := s.revisedAt[k]
		if inProgress && known {
			m.started.WithLabelValues(k.ns, k.name).Set(float64(at.UnixNano()) / 1e9)
		} else {
			m.started.DeleteLabelValues(k.ns, k.name)
		}
	}
	for p, n := range counts {
		m.phases.WithLabelValues(string(p)).Set(float64(n))
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
