package history

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// peakHeap samples the live heap every few milliseconds while fn runs
// and returns the largest sample, in bytes, above the heap before it.
func peakHeap(fn func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	base := read()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	fn()
	close(done)
	wg.Wait()
	peak = max(peak, read())
	if peak < base {
		return 0
	}
	return peak - base
}

// processCPU is the CPU time (user and system) the process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// liveHeap is the live heap after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkExposure is `fleet history exposure` on a history of 10,000
// devices and 50 revisions of one Deployment, each revision (chunked)
// freezing every device, and every device reporting every revision
// Applying then Converged: 1,000,000 reports. The image of revision 1 is
// the worst case (every report is read, 10,000 intervals in the answer);
// the image of revision 50 reads only the reports stored since it. Each
// is asked reading every report (read=reports) and reading the exposure
// index the benchmark has the writer build first (read=index, ADR 0033;
// the index's write cost per report is printed). It prints a goal line
// per question against issue #40's few seconds.
// FLEET_BENCH_EXPOSURE=devices,revisions changes the size;
// FLEET_BENCH_CPUPROFILE=path writes a CPU profile of each question alone
// (path.<read>.1, path.<read>.50), without the history's writing; FLEET_BENCH_FLOOR=1
// also measures the floor of reading the same reports (benchFloor).
func BenchmarkExposure(b *testing.B) {
	n, revs := benchSize(10000, 50)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	b.Cleanup(cancel)
	_, st := natstest.Provisioned(b)
	w := streamWriter{tb: b, ctx: ctx, st: st}
	targets := devices("edge", 0, n)
	start := time.Now()
	for g := int64(1); g <= int64(revs); g++ {
		rev := benchRevision("web", g, targets, targets[:10])
		w.revision("bench", "web", rev, events.ChunkBytes)
		w.transition("bench", "web", events.TypeRolloutStarted, rev, nil, "", "")
		w.transition("bench", "web", events.TypeRolloutReleased, rev, nil, "", "")
		w.reports("bench", "web", rev, targets, events.WorkloadApplying)
		w.reports("bench", "web", rev, targets, events.WorkloadConverged)
	}
	b.Logf("stored %d revisions × %d devices × 2 reports in %s", revs, n, time.Since(start).Round(time.Second))
	// The exposure index, as the operator writes it (ADR 0033): its cost
	// per report.
	cpu0, t0 := processCPU(), time.Now()
	ix := &ExposureIndexWriter{Store: st}
	if err := ix.RunToEnd(ctx); err != nil {
		b.Fatal(err)
	}
	indexCPU, indexWall := processCPU()-cpu0, time.Since(t0)
	str, err := st.JetStream().Stream(ctx, events.StreamIndex)
	if err != nil {
		b.Fatal(err)
	}
	state := str.CachedInfo().State
	reports := float64(2 * n * revs)
	fmt.Printf("index       %d reports: %d records (%.2f per report), %d bytes stored (%.0f per report), %s wall, %.1f s CPU (%.1f µs CPU per report)\n",
		2*n*revs, state.Msgs, float64(state.Msgs)/reports, state.Bytes, float64(state.Bytes)/reports, indexWall.Round(time.Second),
		indexCPU.Seconds(), indexCPU.Seconds()*1e6/reports)
	for _, mode := range []string{"reports", "index"} {
		h, err := New(Options{Reader: st, NoIndex: mode == "reports"})
		if err != nil {
			b.Fatal(err)
		}
		benchQuestions(b, ctx, h, mode, n, revs)
	}
	if os.Getenv("FLEET_BENCH_FLOOR") != "" {
		// After the questions: the server's caches as warm as theirs.
		benchFloor(b, ctx, st, 2*n*revs)
	}
}

// benchQuestions asks the exposure of the images of revisions 1 and revs,
// reading every report (mode "reports") or the index and the reports
// after it ("index").
func benchQuestions(b *testing.B, ctx context.Context, h *History, mode string, n, revs int) {
	var err error
	for _, g := range []int{1, revs} {
		b.Run(fmt.Sprintf("read=%s/image-of-revision=%d", mode, g), func(b *testing.B) {
			q := ExposureQuery{Image: fmt.Sprintf("registry.example.com/web:v%d", g)}
			b.ReportAllocs()
			if path := os.Getenv("FLEET_BENCH_CPUPROFILE"); path != "" {
				f, err := os.Create(fmt.Sprintf("%s.%s.%d", path, mode, g))
				if err != nil {
					b.Fatal(err)
				}
				pprof.StartCPUProfile(f)
				defer pprof.StopCPUProfile()
			}
			var peak, retained uint64
			var cpu, wall time.Duration
			for b.Loop() {
				var e *Exposure
				before := liveHeap()
				peak = max(peak, peakHeap(func() {
					start, t0 := processCPU(), time.Now()
					e, err = h.Exposure(ctx, q)
					cpu += processCPU() - start
					wall += time.Since(t0)
				}))
				if err != nil {
					b.Fatal(err)
				}
				if after := liveHeap(); after > before {
					retained = max(retained, after-before)
				}
				if e.Devices != n || len(e.Intervals) != n {
					b.Fatalf("%d devices, %d intervals; want %d", e.Devices, len(e.Intervals), n)
				}
			}
			// peak-heap is the whole process's, the embedded server's
			// caches of the blocks it reads included; answer is what the
			// answer keeps live once it is built.
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MB")
			b.ReportMetric(float64(retained)/(1<<20), "answer-MB")
			// cpu-s is the CPU time the process (the embedded server
			// serving the read included) spent on a question: on a
			// loaded machine the wall time is mostly the wait for a core.
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			perOp := wall / time.Duration(b.N)
			fmt.Printf("goal        exposure of the image of revision %d of %d (%d devices), read=%s: a few seconds (≤ %s): %s wall, %.2f s CPU, peak heap %.0f MB: %s\n",
				g, revs, n, mode, exposureGoal, perOp.Round(10*time.Millisecond), cpu.Seconds()/float64(b.N), float64(peak)/(1<<20),
				map[bool]string{true: "met", false: "NOT met"}[perOp <= exposureGoal])
		})
	}
}

// benchFloor measures the floor of the oldest image's question: every
// workload report read by events' replay and decoded, without the runner
// or the fold (replay), and by jetstream's ordered consumer with a
// callback that only counts them (raw: a `nats stream view` of the same
// messages, the client's least work per message).
func benchFloor(b *testing.B, ctx context.Context, st *events.Store, want int) {
	for _, name := range []string{"replay", "raw"} {
		b.Run("floor="+name, func(b *testing.B) {
			b.ReportAllocs()
			var cpu time.Duration
			for b.Loop() {
				start := processCPU()
				n := 0
				if name == "replay" {
					for _, err := range st.Replay(ctx, "fleet.report.*.workload", events.FromStart()) {
						if err != nil {
							b.Fatal(err)
						}
						n++
					}
				} else {
					n = rawRead(b, ctx, st)
				}
				cpu += processCPU() - start
				if n != want {
					b.Fatalf("read %d reports; want %d", n, want)
				}
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// rawRead counts the workload reports with an ordered consumer's callback.
func rawRead(b *testing.B, ctx context.Context, st *events.Store) int {
	cons, err := st.JetStream().OrderedConsumer(ctx, events.StreamReports, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"fleet.report.*.workload"}})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	n := 0
	cc, err := cons.Consume(func(m jetstream.Msg) {
		n++
		if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
			close(done)
		}
	}, jetstream.PullMaxMessages(8192))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatal(ctx.Err())
	}
	return n
}

// exposureGoal is issue #40's "a few seconds" for an exposure question.
const exposureGoal = 5 * time.Second

// benchSize is the benchmark's devices and revisions, FLEET_BENCH_EXPOSURE
// ("devices,revisions") overriding the defaults for a quicker profile.
func benchSize(n, revs int) (int, int) {
	if v := os.Getenv("FLEET_BENCH_EXPOSURE"); v != "" {
		fmt.Sscanf(v, "%d,%d", &n, &revs)
	}
	return n, revs
}
