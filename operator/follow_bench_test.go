package operator_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// BenchmarkFollowEnrollment: FLEET_FOLLOW_DEVICES (default 1,000) Devices
// created at once in the real kube-apiserver against a Follow Deployment
// whose rollout succeeded (ADR 0026). The timer runs from the first create
// to every new device's fleet-intent value written. It prints the API
// server's requests in that time beyond the creates themselves (the
// operator's: status writes, and no request per device per decision) and
// the rollout.target-added events appended. It asserts no timing.
func BenchmarkFollowEnrollment(b *testing.B) {
	n := envInt("FLEET_FOLLOW_DEVICES", 1000)
	for range b.N {
		followEnrollment(b, n)
	}
}

func followEnrollment(b *testing.B, n int) {
	b.StopTimer()
	e := benchEnv(b, 20*time.Minute)
	ctx := e.ctx
	labels := map[string]string{"role": "follow-bench"}
	first := "fb-0-" + e.ns
	e.device(first, labels)
	e.startOperator()
	e.followDeployment("bench", labels)
	rev := e.revisionOf("bench", 1)
	e.waitLong("the release to the frozen target", func() bool { return e.intentOf(first, "bench") == 1 })
	e.report(first, "bench", rev, events.WorkloadConverged, "")
	e.waitLong("phase Succeeded", func() bool { return e.get("bench").Status.Phase == fleetv1.PhaseSucceeded })

	before := apiRequests(b, e)
	b.StartTimer()
	start := time.Now()
	created := createDevices(b, e, n, labels, func(i int) string { return fmt.Sprintf("fb-%d-%s", i, e.ns) })
	e.waitLong("every new device's fleet-intent value", func() bool {
		st, err := e.kv.Status(ctx)
		return err == nil && st.Values() >= uint64(n+1)
	})
	joined := time.Since(start)
	b.StopTimer()
	e.waitLong("the status counting every follower", func() bool { return e.get("bench").Status.Counts.Followers == int32(n) })
	requests := delta(before, resources(apiRequests(b, e)))
	creates := requests["POST "+fleetv1.GroupVersion.Group+"/devices"]
	delete(requests, "POST "+fleetv1.GroupVersion.Group+"/devices")
	added := 0
	for _, tr := range e.transitions("bench") {
		if tr == events.TypeRolloutTargetAdded {
			added++
		}
	}
	fmt.Printf("follow enrollment, %d Devices: created in %s, every fleet-intent value written %s after the first create\n",
		n, created.Round(time.Millisecond), joined.Round(time.Millisecond))
	fmt.Printf("  %d rollout.target-added events; API server requests beyond the %.0f creates: %.0f (%.3f per Device): %s\n",
		added, creates, total(requests), total(requests)/float64(n), byKey(requests))
	b.ReportMetric(joined.Seconds(), "joined-s")
	b.ReportMetric(total(requests), "api-requests")
	b.ReportMetric(float64(added), "target-added")
}

// BenchmarkFollowFlapping: one device of a Follow Deployment flips its
// selector label between matching and not, at a period faster and one
// slower than the operator's --follow-debounce (scaled down: 3 s), for
// FLEET_FOLLOW_FLAP_SECONDS (default 15). It prints the joins (each a
// container start on the device) and the follow events per minute. It
// asserts nothing.
func BenchmarkFollowFlapping(b *testing.B) {
	secs := 15
	if v, err := strconv.Atoi(os.Getenv("FLEET_FOLLOW_FLAP_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	const debounce = 3 * time.Second
	for _, period := range []time.Duration{time.Second, 4 * time.Second} {
		b.Run(fmt.Sprintf("a flip every %s, debounce %s", period, debounce), func(b *testing.B) {
			for range b.N {
				followFlapping(b, period, debounce, time.Duration(secs)*time.Second)
			}
		})
	}
}

func followFlapping(b *testing.B, period, debounce, dur time.Duration) {
	b.StopTimer()
	e := newEnv(b)
	e.followDebounce = debounce
	labels := map[string]string{"role": "flap-bench"}
	e.device("fl-0-"+e.ns, labels)
	e.startOperator()
	e.followDeployment("bench", labels)
	e.revisionOf("bench", 1)
	flap := "fl-1-" + e.ns
	e.device(flap, labels)
	e.waitFor("the flapping device joined", func() bool { return e.intentOf(flap, "bench") == 1 })
	b.StartTimer()
	tick := time.NewTicker(period)
	defer tick.Stop()
	flips := 0
	for end := time.Now().Add(dur); time.Now().Before(end); {
		<-tick.C
		flips++
		e.relabel(flap, func(l map[string]string) { l["role"] = []string{"other", "flap-bench"}[flips%2] })
	}
	b.StopTimer()
	if flips%2 == 1 {
		e.relabel(flap, func(l map[string]string) { l["role"] = "flap-bench" })
	}
	e.waitFor("the flapping device holding the revision", func() bool { return e.intentOf(flap, "bench") == 1 })
	joins, leaves := -1, 0 // the join before the flapping is not counted
	for _, tr := range e.transitions("bench") {
		switch tr {
		case events.TypeRolloutTargetAdded:
			joins++
		case events.TypeRolloutTargetRemoved:
			leaves++
		}
	}
	perMin := func(x int) float64 { return float64(x) * float64(time.Minute) / float64(dur) }
	fmt.Printf("follow flapping: %d flips in %s (a flip every %s, debounce %s): %d joins (container starts), %d departures: %.1f container starts and %.1f follow events per minute\n",
		flips, dur, period, debounce, joins, leaves, perMin(joins), perMin(joins+leaves))
	fmt.Printf("  the device's Deployment entry: held throughout %v\n", joins == 0 && leaves == 0)
	b.ReportMetric(perMin(joins), "starts/min")
	b.ReportMetric(perMin(joins+leaves), "events/min")
}
