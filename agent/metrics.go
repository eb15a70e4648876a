package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// Metric names of the agent (docs/metrics.md lists them).
const (
	MetricPassDuration  = "fleet_agent_pass_duration_seconds"
	MetricImagePulls    = "fleet_agent_image_pulls_total"
	MetricRuntimeErrors = "fleet_agent_runtime_errors_total"
	MetricSecretErrors  = "fleet_agent_secret_errors_total"
	MetricReportBuffer  = "fleet_agent_report_buffer_depth"
	MetricConnected     = "fleet_agent_connected"
	MetricIntentReads   = "fleet_agent_intent_reads_total"
	MetricPruneFailures = "fleet_agent_image_prune_failures_total"
)

// Results of a reconcile pass (label result of MetricPassDuration).
const (
	passConverged = "converged"
	passFailed    = "failed"
	passError     = "error"
)

// Operations on the container engine (label op of MetricRuntimeErrors).
const (
	opList        = "list"
	opCreate      = "create"
	opStart       = "start"
	opStop        = "stop"
	opRemove      = "remove"
	opWait        = "wait"
	opImageExists = "image_exists"
	opPull        = "pull"
	opInspect     = "inspect"
	opHealthCheck = "healthcheck"
	opWatch       = "watch"
	opLogs        = "logs"
	opImageDigest = "image_digest"
)

// passBuckets run from 5 ms (nothing to do) to 10 min (a pass includes
// image pulls and 30 s stops).
var passBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Metrics are the device agent's Prometheus metrics (fleet_agent_*). Labels
// are bounded enums; no label ever holds a secret's name or value, an
// image or a Deployment. A nil *Metrics records nothing. Safe for
// concurrent use; one Metrics serves one agent (one Run at a time).
type Metrics struct {
	passes        *prometheus.HistogramVec
	pulls         *prometheus.CounterVec
	runtimeErrors *prometheus.CounterVec
	secretErrors  prometheus.Counter
	buffered      prometheus.Gauge
	connected     prometheus.GaugeFunc
	intentReads   *prometheus.CounterVec
	pruneFailures prometheus.Counter
	// conn is the connection of the running agent; nil when none runs.
	conn atomic.Pointer[nats.Conn]
	// health are the monitor's (metrics_health.go).
	health *healthMetrics
}

// NewMetrics returns the agent's metrics at zero. constLabels are added to
// every series: fleet dev, which runs several agents in one process, gives
// each {"device": name}; the fleet-agent binary gives nil.
func NewMetrics(constLabels prometheus.Labels) *Metrics {
	m := &Metrics{
		passes: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricPassDuration, ConstLabels: constLabels,
			Help: "Duration of one reconcile pass (read the intent, apply every Deployment, report), by result: converged, " +
				"failed (a Deployment failed: preflight, init container, runtime) or error (the pass could not run: intent unreadable, container engine down).",
			Buckets: passBuckets}, []string{"result"}),
		pulls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricImagePulls, ConstLabels: constLabels,
			Help: "Image pulls by the agent, by result (ok, error)."}, []string{"result"}),
		runtimeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRuntimeErrors, ConstLabels: constLabels,
			Help: "Container engine calls that failed, by operation (list, create, start, stop, remove, wait, image_exists, pull); " +
				"a container already gone is not counted."}, []string{"op"}),
		secretErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricSecretErrors, ConstLabels: constLabels,
			Help: "Secret references (secret_env values, pull secrets) the secret source could not resolve: it failed or refused."}),
		buffered: prometheus.NewGauge(prometheus.GaugeOpts{Name: MetricReportBuffer, ConstLabels: constLabels,
			Help: "Reports held while disconnected from NATS, waiting to be sent on the reconnect."}),
		intentReads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricIntentReads, ConstLabels: constLabels,
			Help: "Direct gets of the device's intent, by result: ok, or error (no answer, or a value that is not this device's intent)."},
			[]string{"result"}),
		pruneFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricPruneFailures, ConstLabels: constLabels,
			Help: "Images of replaced revisions the agent could not remove after a switch (the engine refused for another reason than a container using the image or the image being gone), " +
				"and prunes skipped because the containers could not be listed. A failed prune never fails the switch; the images stay on the disk."}),
		health: newHealthMetrics(constLabels),
	}
	m.connected = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: MetricConnected, ConstLabels: constLabels,
		Help: "1 while the agent runs and its NATS connection is up, 0 otherwise."},
		func() float64 {
			if nc := m.conn.Load(); nc != nil && nc.IsConnected() {
				return 1
			}
			return 0
		})
	for _, r := range []string{passConverged, passFailed, passError} {
		m.passes.WithLabelValues(r)
	}
	for _, r := range []string{"ok", "error"} {
		m.pulls.WithLabelValues(r)
		m.intentReads.WithLabelValues(r)
	}
	for _, op := range []string{opList, opCreate, opStart, opStop, opRemove, opWait, opImageExists, opPull, opInspect, opHealthCheck, opWatch, opLogs, opImageDigest} {
		m.runtimeErrors.WithLabelValues(op)
	}
	return m
}

// Collectors returns the collectors to register; they may be registered
// before Run starts (fleet_agent_connected reads 0 until then).
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return append([]prometheus.Collector{m.passes, m.pulls, m.runtimeErrors, m.secretErrors, m.buffered, m.connected, m.intentReads, m.pruneFailures},
		m.health.collectors()...)
}

// attach makes fleet_agent_connected follow nc while the agent runs.
func (m *Metrics) attach(nc *nats.Conn) {
	if m != nil {
		m.conn.Store(nc)
	}
}

// detach is the end of the agent that ran on nc: not connected, nothing
// held any more.
func (m *Metrics) detach(nc *nats.Conn) {
	if m != nil {
		m.conn.CompareAndSwap(nc, nil)
		m.buffered.Set(0)
	}
}

// pass records one reconcile pass of result that took d.
func (m *Metrics) pass(result string, d time.Duration) {
	if m != nil {
		m.passes.WithLabelValues(result).Observe(d.Seconds())
	}
}

// intentRead records one direct get of the intent.
func (m *Metrics) intentRead(err error) {
	if m != nil {
		m.intentReads.WithLabelValues(result(err)).Inc()
	}
}

// setBuffered records the number of reports held while offline.
func (m *Metrics) setBuffered(n int) {
	if m != nil {
		m.buffered.Set(float64(n))
	}
}

// secretFailed records a secret reference the source could not resolve,
// unless the agent is stopping (ctx done).
func (m *Metrics) secretFailed(ctx context.Context) {
	if m != nil && ctx.Err() == nil {
		m.secretErrors.Inc()
	}
}

// engineCall records a failed engine call of op, unless the container was
// already gone or the agent is stopping (ctx done).
func (m *Metrics) engineCall(ctx context.Context, op string, err error) {
	if m == nil || err == nil || errors.Is(err, runtime.ErrNotFound) || ctx.Err() != nil {
		return
	}
	m.runtimeErrors.WithLabelValues(op).Inc()
}

// pruneFailed records an image the agent could not remove, or a prune it
// could not run, unless the agent is stopping (ctx done).
func (m *Metrics) pruneFailed(ctx context.Context) {
	if m != nil && ctx.Err() == nil {
		m.pruneFailures.Inc()
	}
}

// pulled records an image pull, unless the agent is stopping (ctx done).
func (m *Metrics) pulled(ctx context.Context, err error) {
	if m == nil || ctx.Err() != nil {
		return
	}
	m.pulls.WithLabelValues(result(err)).Inc()
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// countedRuntime is a runtime.Runtime whose failed calls are counted.
type countedRuntime struct {
	rt runtime.Runtime
	m  *Metrics
}

func (c countedRuntime) List(ctx context.Context) ([]runtime.Container, error) {
	out, err := c.rt.List(ctx)
	c.m.engineCall(ctx, opList, err)
	return out, err
}

// Inspect is counted, except a container already gone (the reconciler
// inspects the services whose health it waits for).
func (c countedRuntime) Inspect(ctx context.Context, idOrName string) (runtime.Container, error) {
	out, err := c.rt.Inspect(ctx, idOrName)
	c.m.engineCall(ctx, opInspect, err)
	return out, err
}

func (c countedRuntime) RunHealthCheck(ctx context.Context, id string) error {
	err := c.rt.RunHealthCheck(ctx, id)
	c.m.engineCall(ctx, opHealthCheck, err)
	return err
}

// Watch is counted when it cannot start; a stream that breaks later is
// not an engine call that failed (the channel says so with EventLost).
func (c countedRuntime) Watch(ctx context.Context, labels map[string]string) (<-chan runtime.ContainerEvent, error) {
	ch, err := c.rt.Watch(ctx, labels)
	c.m.engineCall(ctx, opWatch, err)
	return ch, err
}

// Logs is counted, except a container already gone.
func (c countedRuntime) Logs(ctx context.Context, id string, tail int) ([]string, error) {
	lines, err := c.rt.Logs(ctx, id, tail)
	c.m.engineCall(ctx, opLogs, err)
	return lines, err
}

func (c countedRuntime) ImageExists(ctx context.Context, ref string) (bool, error) {
	ok, err := c.rt.ImageExists(ctx, ref)
	c.m.engineCall(ctx, opImageExists, err)
	return ok, err
}

func (c countedRuntime) ImageDigest(ctx context.Context, ref string) (string, error) {
	d, err := c.rt.ImageDigest(ctx, ref)
	c.m.engineCall(ctx, opImageDigest, err)
	return d, err
}

func (c countedRuntime) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	err := c.rt.Pull(ctx, ref, auth)
	c.m.engineCall(ctx, opPull, err)
	c.m.pulled(ctx, err)
	return err
}

func (c countedRuntime) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	id, err := c.rt.Create(ctx, spec)
	c.m.engineCall(ctx, opCreate, err)
	return id, err
}

func (c countedRuntime) Start(ctx context.Context, id string) error {
	err := c.rt.Start(ctx, id)
	c.m.engineCall(ctx, opStart, err)
	return err
}

func (c countedRuntime) Wait(ctx context.Context, id string) (int, error) {
	code, err := c.rt.Wait(ctx, id)
	c.m.engineCall(ctx, opWait, err)
	return code, err
}

func (c countedRuntime) Stop(ctx context.Context, id string, timeout time.Duration) error {
	err := c.rt.Stop(ctx, id, timeout)
	c.m.engineCall(ctx, opStop, err)
	return err
}

func (c countedRuntime) Remove(ctx context.Context, id string, force bool) error {
	err := c.rt.Remove(ctx, id, force)
	c.m.engineCall(ctx, opRemove, err)
	return err
}

// countedSecrets is a Secrets whose failures are counted.
type countedSecrets struct {
	s Secrets
	m *Metrics
}

func (c countedSecrets) Resolve(ctx context.Context, path, key string) (string, error) {
	v, err := c.s.Resolve(ctx, path, key)
	if err != nil {
		c.m.secretFailed(ctx)
	}
	return v, err
}
