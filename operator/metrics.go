package operator

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nationtech/harmony-fleet/operator/deployments"
	"github.com/nationtech/harmony-fleet/operator/devices"
	"github.com/nationtech/harmony-fleet/operator/rollouts"
)

// MetricLeader is 1 on the operator replica that runs the controllers.
const MetricLeader = "fleet_operator_leader"

// Metrics are the operator's own Prometheus metrics: each role's
// (deployments.Metrics, rollouts.Metrics, devices.Metrics) and the root's
// fleet_operator_leader. controller-runtime adds its own on the same
// registry (controller_runtime_*, workqueue_*, rest_client_*). Safe for
// concurrent use.
type Metrics struct {
	// Deployments are the Deployment controller's (revisions appended).
	Deployments *deployments.Metrics
	// Rollouts are the rollout runner's.
	Rollouts *rollouts.Metrics
	// Devices are the Device controller's.
	Devices *devices.Metrics
	leader  prometheus.Gauge
}

// NewMetrics returns the operator's metrics at zero: each role's and the
// leader gauge.
func NewMetrics() *Metrics {
	return &Metrics{
		Deployments: deployments.NewMetrics(),
		Rollouts:    rollouts.NewMetrics(),
		Devices:     devices.NewMetrics(),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricLeader,
			Help: "1 on the operator replica that runs the controllers (the elected leader; a single replica leads once started), 0 otherwise."}),
	}
}

// Collectors returns the collectors to register: the roles' and the
// leader gauge.
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	cs := slices.Concat(m.Deployments.Collectors(), m.Rollouts.Collectors(), m.Devices.Collectors())
	if m.leader != nil {
		cs = append(cs, m.leader)
	}
	return cs
}

// processMetrics are the metrics of operators started without their own.
var processMetrics = sync.OnceValue(NewMetrics)

// ProcessMetrics returns the metrics operators of this process use when
// Options.Metrics is nil.
func ProcessMetrics() *Metrics { return processMetrics() }

// Register registers m with controller-runtime's metrics registry (served
// on Options.MetricsAddr). Registering the same metrics again (a second
// operator in the process) is fine; other metrics under the same names are
// not exported, and that is logged.
func (m *Metrics) Register(log *slog.Logger) error {
	for _, c := range m.Collectors() {
		err := ctrlmetrics.Registry.Register(c)
		var are prometheus.AlreadyRegisteredError
		switch {
		case err == nil:
		case errors.As(err, &are):
			if are.ExistingCollector != c {
				log.Info("other operator metrics are already registered in this process; this operator's are not exported")
				return nil
			}
		default:
			return fmt.Errorf("operator: register metrics: %w", err)
		}
	}
	return nil
}

// SetLeader sets fleet_operator_leader: 1 while this replica leads.
func (m *Metrics) SetLeader(leader bool) {
	if m == nil || m.leader == nil {
		return
	}
	v := 0.0
	if leader {
		v = 1
	}
	m.leader.Set(v)
}
