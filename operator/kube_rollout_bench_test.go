package operator_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	stdmaps "maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/client-go/rest"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// BenchmarkKubeRollout is the rollout path with Kubernetes in it:
// FLEET_KUBE_DEVICES (default 1,000; the figure is 10,000) Device
// objects in the real kube-apiserver, the operator running against it (its
// Device controller with FLEET_KUBE_DEVICE_WORKERS workers, default
// operator.DefaultDeviceWorkers), and `kubectl apply` of a Deployment
// selecting all of them. From the apply on,
// the operator's own code resolves the targets from the Devices, appends
// the revision, writes every device's fleet-intent value and patches the
// Deployment's status; each device's Applying and Converged reports are
// published as an agent publishes them (core NATS, no agent process: the
// agents' side is the scale benchmark's, bench), and the run
// ends when the Deployment's status says Succeeded. It prints the times
// from the apply, the API server's requests during the rollout by verb and
// resource (apiserver_request_total), and the test process's Go heap (the
// operator, the embedded NATS server and the benchmark share it). It
// asserts no timing.
func BenchmarkKubeRollout(b *testing.B) {
	n := envInt("FLEET_KUBE_DEVICES", 1000)
	for range b.N {
		kubeRollout(b, n)
	}
}

// kubeRollout runs one rollout; the timer runs from the apply to the
// status Succeeded.
func kubeRollout(b *testing.B, n int) {
	b.StopTimer()
	e := benchEnv(b, 30*time.Minute)
	ctx := e.ctx
	labels := map[string]string{"role": "kube-bench"}
	t0 := time.Now()
	created := createDevices(b, e, n, labels, func(i int) string { return fmt.Sprintf("kb-%d", i) })
	withDeviceController(e)
	idBefore := apiRequests(b, e)
	recBefore := deviceReconciles(b)
	fmt.Fprintf(os.Stderr, "kube rollout: %d Devices created in %s\n", n, created.Round(time.Millisecond))
	e.startOperator()
	idkv, err := e.store.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		b.Fatal(err)
	}
	e.waitLong("every Device's fleet-identity entry", func() bool {
		st, err := idkv.Status(ctx)
		return err == nil && st.Values() >= uint64(n)
	})
	identities := time.Since(t0) - created
	fmt.Fprintf(os.Stderr, "kube rollout: fleet-identity projected %s later\n", identities.Round(time.Millisecond))
	idDelta := delta(idBefore, resources(apiRequests(b, e)))
	recDelta := deviceReconciles(b)
	recDelta.count -= recBefore.count
	recDelta.seconds -= recBefore.seconds
	// Let the Device controller's writes settle before counting: a second
	// without a request on a resource (the benchmark's own GET /metrics
	// has none), at most a minute.
	before := apiRequests(b, e)
	for settle := time.Now(); time.Since(settle) < time.Minute; {
		time.Sleep(time.Second)
		now := apiRequests(b, e)
		quiet := total(resources(now))-total(resources(before)) == 0
		before = now
		if quiet {
			break
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heapBefore := ms.HeapInuse
	var heapMax atomic.Uint64
	sampling, stopSampling := context.WithCancel(ctx)
	go func() {
		for sampling.Err() == nil {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapInuse > heapMax.Load() {
				heapMax.Store(m.HeapInuse)
			}
			select {
			case <-sampling.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()

	b.StartTimer()
	start := time.Now()
	res := <-e.kubectl("kubectl apply -f - <<'EOF'\n" + e.manifest("bench", "v1", labels) + "EOF\n")
	if res.err != nil {
		b.Fatalf("kubectl apply: %v\n%s", res.err, res.out)
	}
	applied := time.Since(start)
	rev := e.revisionOf("bench", 1)
	revised := time.Since(start)
	e.waitLong("every fleet-intent value", func() bool {
		st, err := e.kv.Status(ctx)
		return err == nil && st.Values() >= uint64(n)
	})
	projected := time.Since(start)
	msgs := make([]*nats.Msg, 0, 2*n)
	for _, phase := range []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged} {
		for i := 1; i <= n; i++ {
			m, err := events.Message(e.workloadReport(fmt.Sprintf("kb-%d", i), "bench", rev, phase, ""))
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, m)
		}
	}
	if err := e.publishReports(msgs...); err != nil {
		b.Fatal(err)
	}
	reported := time.Since(start)
	e.waitLong("phase Succeeded", func() bool { return e.get("bench").Status.Phase == fleetv1.PhaseSucceeded })
	succeeded := time.Since(start)
	b.StopTimer()
	stopSampling()
	rollout := delta(before, apiRequests(b, e))
	fmt.Printf("kube rollout, %d Devices: created in %s, fleet-identity projected %s later\n", n, created.Round(time.Millisecond), identities.Round(time.Millisecond))
	fmt.Printf("  while projecting: %.0f Devices/s; %.0f Device reconciles (%.1f per Device), %.1f ms each on average; API server writes on Devices %.0f (%.2f per Device): %s\n",
		float64(n)/identities.Seconds(), recDelta.count, recDelta.count/float64(n), 1000*recDelta.seconds/max(recDelta.count, 1),
		total(deviceWrites(idDelta)), total(deviceWrites(idDelta))/float64(n), byKey(deviceWrites(idDelta)))
	fmt.Printf("  from kubectl apply: applied %s, revision appended %s, every fleet-intent value written %s, reports published %s, status Succeeded %s\n",
		applied.Round(time.Millisecond), revised.Round(time.Millisecond), projected.Round(time.Millisecond), reported.Round(time.Millisecond), succeeded.Round(time.Millisecond))
	fmt.Printf("  Go heap in use (operator, NATS server and benchmark in one process): %.1f MB before, at most %.1f MB during\n",
		float64(heapBefore)/1e6, float64(heapMax.Load())/1e6)
	fmt.Printf("  API server requests during the rollout: %.0f in all (%.3f per Device)\n", total(rollout), total(rollout)/float64(n))
	fmt.Printf("goal        %d Devices: no API request per Device during the rollout (fewer than one per 10 Devices): %.0f requests: %s\n",
		n, total(rollout), map[bool]string{true: "met", false: "NOT met"}[total(rollout) < float64(n)/10])
	keys := make([]string, 0, len(rollout))
	for k := range rollout {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Printf("    %-60s %.0f\n", k, rollout[k])
	}
	b.ReportMetric(succeeded.Seconds(), "succeeded-s")
	b.ReportMetric(total(rollout), "api-requests")
	b.ReportMetric(float64(n)/identities.Seconds(), "identities/s")
}

// waitLong is waitFor with the benchmark's deadline (the context's).
func (e *env) waitLong(what string, cond func() bool) {
	e.t.Helper()
	for !cond() {
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("%s: not within the benchmark's deadline", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// apiRequests reads the API server's apiserver_request_total, summed by
// verb, group, resource and subresource (the watch and metrics requests of
// the benchmark itself included: one GET /metrics per call).
func apiRequests(tb testing.TB, e *env) map[string]float64 {
	tb.Helper()
	hc, err := rest.HTTPClientFor(e.srv.RESTConfig())
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := hc.Get(strings.TrimSuffix(e.srv.RESTConfig().Host, "/") + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 64<<20))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		l := map[string]string{}
		for _, kv := range strings.Split(labels, ",") {
			k, val, _ := strings.Cut(kv, "=")
			l[k] = strings.Trim(val, `"`)
		}
		key := l["verb"] + " " + l["group"] + "/" + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// resources keeps the counts of requests on a resource (not /metrics,
// /healthz and the like).
func resources(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if !strings.HasSuffix(k, "/") {
			out[k] = v
		}
	}
	return out
}

// delta returns after - before, the keys that grew only.
func delta(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// deviceWrites keeps the write requests on Devices (and their status).
func deviceWrites(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		verb, res, _ := strings.Cut(k, " ")
		if verb != "GET" && verb != "LIST" && verb != "WATCH" && strings.HasPrefix(res, fleetv1.GroupVersion.Group+"/devices") {
			out[k] = v
		}
	}
	return out
}

// byKey formats the counts in key order.
func byKey(m map[string]float64) string {
	keys := slices.Sorted(stdmaps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.0f", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// reconciles is what controller-runtime's reconcile-time histogram says of
// one controller.
type reconciles struct{ count, seconds float64 }

// deviceReconciles reads the Device controller's reconcile count and time
// from controller-runtime's registry (controller_runtime_reconcile_time_seconds,
// summed over the operators of this process).
func deviceReconciles(tb testing.TB) reconciles {
	tb.Helper()
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	var r reconciles
	for _, f := range fams {
		if f.GetName() != "controller_runtime_reconcile_time_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "fleet-device" {
					r.count += float64(m.GetHistogram().GetSampleCount())
					r.seconds += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return r
}

func total(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}
