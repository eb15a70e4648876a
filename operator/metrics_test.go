package operator_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// scrape gathers m and returns the value of one series (a counter, gauge,
// or a histogram's sample count) and whether it exists.
func scrape(t *testing.T, m *operator.Metrics, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range s.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return value(s), true
		}
	}
	return 0, false
}

func value(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Histogram != nil:
		return float64(s.Histogram.GetSampleCount())
	}
	return 0
}

func TestTheOperatorsMetricsFollowARollout(t *testing.T) {
	e := newEnv(t)
	e.metrics = operator.NewMetrics()
	m := e.metrics
	e.device("m1", map[string]string{"role": "metrics"})
	e.device("m2", map[string]string{"role": "metrics"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "metrics"})
	rev := e.revisionOf("api", 1)
	dep := map[string]string{"namespace": e.ns, "deployment": "api"}

	// While the rollout is in progress its start time is exported.
	e.waitFor("the rollout's start time", func() bool {
		at, ok := scrape(t, m, operator.MetricRolloutStarted, dep)
		return ok && at > float64(time.Now().Add(-time.Hour).Unix())
	})
	e.report("m1", "api", rev, events.WorkloadConverged, "")
	e.report("m2", "api", rev, events.WorkloadConverged, "")
	e.waitPhase("api", fleetv1.PhaseSucceeded)

	for _, tc := range []struct {
		name   string
		metric string
		labels map[string]string
		atLeast,
		atMost float64
	}{
		{"the revision is counted as appended once", operator.MetricRevisions, map[string]string{"result": "appended"}, 1, 1},
		{"the rollout's success is one transition of its Deployment", operator.MetricRolloutTransitions,
			map[string]string{"namespace": e.ns, "deployment": "api", "type": string(events.TypeRolloutSucceeded)}, 1, 1},
		{"its start is one transition too", operator.MetricRolloutTransitions,
			map[string]string{"namespace": e.ns, "deployment": "api", "type": string(events.TypeRolloutStarted)}, 1, 1},
		{"its duration is observed once, as succeeded", operator.MetricRolloutDuration,
			map[string]string{"namespace": e.ns, "deployment": "api", "result": "succeeded"}, 1, 1},
		{"both reports were folded", operator.MetricRunnerReports, map[string]string{"outcome": "folded"}, 2, 1e9},
		{"both devices' intent values were put", operator.MetricRunnerIntentWrites, map[string]string{"op": "put", "result": "ok"}, 2, 1e9},
		{"the status was written", operator.MetricRunnerStatusWrites, map[string]string{"result": "ok"}, 1, 1e9},
		{"one Deployment is Succeeded", operator.MetricRollouts, map[string]string{"phase": "Succeeded"}, 1, 1},
		{"none is Progressing", operator.MetricRollouts, map[string]string{"phase": "Progressing"}, 0, 0},
		{"the runner is live", operator.MetricRunnerLive, nil, 1, 1},
		{"the operator leads", operator.MetricLeader, nil, 1, 1},
		{"no status write failed", operator.MetricRunnerStatusWrites, map[string]string{"result": "error"}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The status tick sets the gauges: poll until they agree.
			var got float64
			err := testenv.Poll(e.ctx, 60*time.Second, func() bool {
				got, _ = scrape(t, m, tc.metric, tc.labels)
				return got >= tc.atLeast && got <= tc.atMost
			})
			if err != nil {
				t.Errorf("%s%v = %v, want %v..%v", tc.metric, tc.labels, got, tc.atLeast, tc.atMost)
			}
		})
	}
	e.waitFor("the finished rollout's start time to go", func() bool {
		_, ok := scrape(t, m, operator.MetricRolloutStarted, dep)
		return !ok
	})
}

// TestTheDevicesGaugeCountsEveryDeviceByLiveness: the operator decides
// every Device of the cluster (other tests' too, on this shared API server,
// none of them heartbeating now), so the gauge's total is the number of
// Devices, and only the one device heartbeating here is Online.
func TestTheDevicesGaugeCountsEveryDeviceByLiveness(t *testing.T) {
	e := newDevEnv(t)
	e.metrics = operator.NewMetrics()
	id := e.id("rpi-m")
	e.create(id, nil)
	e.start(2 * time.Second)
	count := func(l fleetv1.Liveness) float64 {
		v, _ := scrape(t, e.metrics, operator.MetricDevices, map[string]string{"liveness": string(l)})
		return v
	}
	total := func() float64 {
		return count(fleetv1.LivenessOnline) + count(fleetv1.LivenessStale) + count(fleetv1.LivenessUnknown)
	}
	devices := func() float64 {
		var all fleetv1.DeviceList
		if err := e.c.List(e.ctx, &all); err != nil {
			t.Fatal(err)
		}
		return float64(len(all.Items))
	}
	wait := func(what string, cond func() bool) {
		t.Helper()
		if err := testenv.Poll(e.ctx, 60*time.Second, cond); err != nil {
			t.Fatalf("%v waiting for %s: online %v, stale %v, unknown %v; %v Devices", err, what,
				count(fleetv1.LivenessOnline), count(fleetv1.LivenessStale), count(fleetv1.LivenessUnknown), devices())
		}
	}
	e.heartbeat(id)
	wait("the heartbeating device Online, every Device counted", func() bool {
		if count(fleetv1.LivenessOnline) != 1 {
			e.heartbeat(id) // a slow start may have decided the first beat stale already
			return false
		}
		return total() == devices()
	})
	wait("that device Stale", func() bool { return count(fleetv1.LivenessOnline) == 0 && total() == devices() })
	if err := e.c.Delete(e.ctx, e.get(id)); err != nil {
		t.Fatal(err)
	}
	e.waitGone(id)
	wait("the deleted Device no longer counted", func() bool { return total() == devices() })
}
