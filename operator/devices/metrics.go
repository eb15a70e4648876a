package devices

import (
	"github.com/prometheus/client_golang/prometheus"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/trimmed"
)

// Metric names of the Device role the alert rules and the docs use.
const (
	// MetricDevices counts Devices by liveness.
	MetricDevices = "fleet_devices"
	// MetricDeviceReportsTrimmed counts device inventories cut to the
	// bounds of a Device, by the field cut (never by device).
	MetricDeviceReportsTrimmed = "fleet_device_reports_trimmed_total"
	// MetricContainerRestarts counts the restarts of Deployments'
	// containers the devices reported, by Deployment (never by device).
	MetricContainerRestarts = "fleet_deployment_container_restarts_total"
)

// Metrics are the Device role's Prometheus metrics (fleet_devices,
// fleet_device_reports_trimmed_total,
// fleet_deployment_container_restarts_total). Labels are bounded: by
// Deployment at most, never by device. A nil *Metrics records nothing.
// Safe for concurrent use.
type Metrics struct {
	devices  *prometheus.GaugeVec
	trimmed  *prometheus.CounterVec
	restarts *prometheus.CounterVec
}

// NewMetrics returns the Device role's metrics at zero, every liveness and
// trimmed field pre-created.
func NewMetrics() *Metrics {
	m := &Metrics{
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricDevices,
			Help: "Devices by liveness (Online, Stale, Unknown) as the Device controller last decided."},
			[]string{"liveness"}),
		trimmed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricDeviceReportsTrimmed,
			Help: "Device inventories the Device controller cut to the bounds of a Device before writing it, by the field cut: labels (reported labels dropped), inventory.os, inventory.arch, inventory.kernel, inventory.agentVersion (string truncated). Counted per inventory read (again after an operator restart)."},
			[]string{"field"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricContainerRestarts,
			Help: "Restarts of a Deployment's containers on its devices: the growth of each container's restart count between two consecutive container reports of a device (a replaced container counts its whole count). A device's first report after an operator start is its baseline."},
			[]string{"namespace", "deployment"}),
	}
	for _, l := range []fleetv1.Liveness{fleetv1.LivenessOnline, fleetv1.LivenessStale, fleetv1.LivenessUnknown} {
		m.devices.WithLabelValues(string(l))
	}
	for _, f := range trimmed.Fields {
		m.trimmed.WithLabelValues(f)
	}
	return m
}

// Collectors returns the collectors to register (none of a nil *Metrics).
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.devices, m.trimmed, m.restarts}
}

// ReportTrimmed counts one device inventory cut at field.
func (m *Metrics) ReportTrimmed(field string) {
	if m != nil {
		m.trimmed.WithLabelValues(field).Inc()
	}
}

// ContainerRestarts adds n restarts of the containers of Deployment
// namespace/deployment (the growth between two container reports of one
// device).
func (m *Metrics) ContainerRestarts(namespace, deployment string, n int64) {
	if m != nil && n > 0 {
		m.restarts.WithLabelValues(namespace, deployment).Add(float64(n))
	}
}

// LivenessChanged moves one device from liveness from ("": none) to to
// ("": gone).
func (m *Metrics) LivenessChanged(from, to fleetv1.Liveness) {
	if m == nil || from == to {
		return
	}
	if from != "" {
		m.devices.WithLabelValues(string(from)).Dec()
	}
	if to != "" {
		m.devices.WithLabelValues(string(to)).Inc()
	}
}
