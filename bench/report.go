package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// printResult prints one size's figures and the goals.
func printResult(w io.Writer, r Result) {
	rss, heap := r.PerDevice()
	where := "the embedded server"
	if r.Servers > 0 {
		where = fmt.Sprintf("a cluster of %d nats-server processes", r.Servers)
	}
	fmt.Fprintf(w, "\nN=%d devices (%d agent process(es), %s)\n", r.N, r.Children, where)
	fmt.Fprintf(w, "  ramp        %8s  (connects spread over %s; connect p50 %s, p99 %s, max %s; %d retried attempts)\n",
		r.Ramp.Round(time.Millisecond), r.RampWindow.Round(time.Millisecond), r.ConnectP50.Round(time.Millisecond),
		r.ConnectP99.Round(time.Millisecond), r.ConnectMax.Round(time.Millisecond), r.ConnectRetries)
	fmt.Fprintf(w, "  projected   %8s  (revision appended → runner wrote every device's fleet-intent value)\n", r.Projected.Round(time.Millisecond))
	fmt.Fprintf(w, "  converged   %8s  (revision appended → every device reported Converged)\n", r.Converged.Round(time.Millisecond))
	fmt.Fprintf(w, "  succeeded   %8s  (revision appended → runner appended rollout.succeeded)\n", r.Succeeded.Round(time.Millisecond))
	fmt.Fprintf(w, "  floor       %8s  (N async KV puts → N plain subscribers answered; better of %s and %s); sync puts %s\n",
		r.FloorAsync.Round(time.Millisecond), r.FloorAsyncRounds[0].Round(time.Millisecond), r.FloorAsyncRounds[1].Round(time.Millisecond),
		r.FloorSync.Round(time.Millisecond))
	fmt.Fprintf(w, "  stored floor %7s  (the same puts → N subscribers answered each value's copy republished once stored; better of two async rounds); sync puts %s\n",
		r.FloorStoredAsync.Round(time.Millisecond), r.FloorStoredSync.Round(time.Millisecond))
	fmt.Fprintf(w, "  ratio       %8.1f× converged / floor, %.1f× converged / stored floor\n", r.Ratio(), r.RatioStored())
	fmt.Fprintf(w, "  goal        N=%d converged within %.0f× the raw floor: %.1f× (%s against %s): %s\n",
		r.N, GoalFloorFactor, r.Ratio(), r.Converged.Round(time.Millisecond), r.FloorAsync.Round(time.Millisecond), met(r.Ratio() <= GoalFloorFactor))
	fmt.Fprintf(w, "  goal        N=%d converged within %.0f× the stored floor: %.1f× (%s against %s): %s\n",
		r.N, GoalFloorFactor, r.RatioStored(), r.Converged.Round(time.Millisecond), r.FloorStoredAsync.Round(time.Millisecond), met(r.RatioStored() <= GoalFloorFactor))
	switch {
	case r.N >= 100000:
		fmt.Fprintf(w, "  goal        N=%d converged ≤ %s: %s: %s\n", r.N, GoalConverged100k, r.Converged.Round(time.Millisecond), met(r.Converged <= GoalConverged100k))
	case r.N >= 10000:
		fmt.Fprintf(w, "  goal        N=%d converged ≤ %s: %s: %s\n", r.N, GoalConverged, r.Converged.Round(time.Millisecond), met(r.Converged <= GoalConverged))
	}
	if r.Servers == 0 {
		fmt.Fprintf(w, "  memory      %.1f KB RSS, %.1f KB Go heap per connected device in the server process (RSS %d → %d MB, heap %d → %d MB)\n",
			float64(rss)/1024, float64(heap)/1024, r.MemBefore.RSS>>20, r.MemAfter.RSS>>20, r.MemBefore.Heap>>20, r.MemAfter.Heap>>20)
	} else {
		fmt.Fprintf(w, "  memory      %.1f KB RSS, %.1f KB Go heap, %.1f KB goroutine stacks per connected device in the nats-server processes (RSS %d → %d MB, heap %d → %d MB summed)\n",
			float64(r.ServerRSSPerDevice())/1024, float64(r.ServerHeapPerDevice())/1024, float64(r.ServerStacksPerDevice())/1024,
			r.ServerRSSBefore>>20, r.ServerRSSAfter>>20, r.ServerHeapBefore.Heap>>20, r.ServerHeapAfter.Heap>>20)
		fmt.Fprintf(w, "              %.1f KB RSS, %.1f KB Go heap per device in the control plane process: callout, provider, runner (RSS %d → %d MB, heap %d → %d MB)\n",
			float64(rss)/1024, float64(heap)/1024, r.MemBefore.RSS>>20, r.MemAfter.RSS>>20, r.MemBefore.Heap>>20, r.MemAfter.Heap>>20)
	}
	fmt.Fprintf(w, "  agents      %.1f KB RSS per device in the agent processes (%d MB in all: agent daemon, simulated runtime, client connection)\n",
		float64(r.AgentRSS)/1024/float64(r.N), r.AgentRSS>>20)
	fmt.Fprintf(w, "              %.1f KB Go heap, %.1f KB goroutine stacks, %.1f goroutines per device in the agent processes (after a forced collection)\n",
		float64(r.AgentHeap)/1024/float64(r.N), float64(r.AgentStacks)/1024/float64(r.N), float64(r.AgentGoroutines)/float64(r.N))
	fmt.Fprintf(w, "  consumers   %d before, %d connected, %d converged, %d after the floor\n",
		r.Consumers[0], r.Consumers[1], r.Consumers[2], r.Consumers[3])
	fmt.Fprintf(w, "  goal        N=%d JetStream consumer count does not grow with the devices: %v: %s\n", r.N, r.Consumers, met(!r.ConsumersGrew()))
	if r.Flood != nil {
		printFlood(w, r)
	}
	if r.Hold != nil {
		printHold(w, r)
	}
}

// printFlood prints the rollout under a flood against the rollout without.
func printFlood(w io.Writer, r Result) {
	f := r.Flood
	tot, rep, tel := f.Total(), f.Stream(events.StreamReports), f.Stream(events.StreamTelemetry)
	secs := max(f.Duration.Seconds(), 1e-9)
	mb := func(b uint64) float64 { return float64(b) / 1e6 }
	what := "all of their report subjects"
	if f.WorkloadOnly {
		what = "their workload subjects, small reports only"
	}
	fmt.Fprintf(w, "  flood       %d flooding device(s), not targets, publishing on %s for %s (revision appended → rollout.succeeded)\n",
		f.Flooders, what, f.Duration.Round(time.Millisecond))
	fmt.Fprintf(w, "    converged   %8s  under the flood (%s without); projected %s (%s); succeeded %s (%s)\n",
		f.Converged.Round(time.Millisecond), r.Converged.Round(time.Millisecond), f.Projected.Round(time.Millisecond),
		r.Projected.Round(time.Millisecond), f.Succeeded.Round(time.Millisecond), r.Succeeded.Round(time.Millisecond))
	fmt.Fprintf(w, "    published   %d messages (%.0f/s), %.1f MB (%.1f MB/s), never answered (the report streams do not acknowledge); %d publish errors, %d disconnects\n",
		tot.Published, float64(tot.Published)/secs, mb(tot.PublishedBytes), mb(tot.PublishedBytes)/secs, f.PublishErrors, f.Disconnects)
	for _, k := range floodKinds {
		t := f.ByKind[string(k)]
		fmt.Fprintf(w, "      %-10s %8d published (%7.1f MB)\n", k, t.Published, mb(t.PublishedBytes))
	}
	fmt.Fprintf(w, "    %-13s took %d messages over the flood (the flooders published %d there, %.1f MB payload; the targets' own reports and the sentinels are the rest); %d of the flooders' held after it; the stream grew %.1f MB in all\n",
		events.StreamReports, f.IngestedReports, rep.Published, mb(rep.PublishedBytes), f.InReports, mb(f.ReportsGrowth))
	fmt.Fprintf(w, "    %-13s took %d messages over the flood (%d published by the flooders); %d of the flooders' kept after it (the last few per subject)\n",
		events.StreamTelemetry, f.IngestedTelemetry, tel.Published, f.InTelemetry)
	fmt.Fprintf(w, "    runner      skipped %d undecodable records; largest backlog %d workload reports; read past the flood %s after it was flushed; succeeded − converged %s (%s without)\n",
		f.RunnerSkipped, f.RunnerMaxBacklog, f.Drain.Round(time.Millisecond), (f.Succeeded - f.Converged).Round(time.Millisecond),
		(r.Succeeded - r.Converged).Round(time.Millisecond))
	fmt.Fprintf(w, "    memory      control plane process RSS %d MB before the flood, at most %d MB until it was drained\n", f.RSSBefore>>20, f.PeakRSS>>20)
	fmt.Fprintf(w, "    forgeries   %d of %d targets had reported Converged themselves when rollout.succeeded arrived; most failed and degraded targets the runner showed: %d and %d\n",
		f.ConvergedAtSucceeded, r.N, f.RunnerMaxFailed, f.RunnerMaxDegraded)
	fmt.Fprintf(w, "  goal        N=%d under a flood no forged report is counted (%d converged at succeeded, %d failed, %d degraded; must be %d, 0, 0): %s\n",
		r.N, f.ConvergedAtSucceeded, f.RunnerMaxFailed, f.RunnerMaxDegraded, r.N, met(f.ConvergedAtSucceeded == r.N && f.RunnerMaxFailed == 0 && f.RunnerMaxDegraded == 0))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
