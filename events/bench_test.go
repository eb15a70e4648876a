package events_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// Benchmarks compare the product path with raw JetStream calls on the same
// payloads in the same run, and TestMain prints the ratios. They are figures,
// never assertions.

var (
	benchMu  sync.Mutex
	benchNs  = map[string]float64{} // benchmark name → ns per event (last run)
	ratioSet = [][3]string{         // label, product, raw (ratio = raw ns / product ns: 1.0 = as fast)
		{"append sync vs raw publish (goal >= 0.8)", "BenchmarkAppend/sync/events", "BenchmarkAppend/sync/raw"},
		{"append async batch vs raw async publish (goal >= 0.8)", "BenchmarkAppend/async/events", "BenchmarkAppend/async/raw"},
		{"replay vs raw ordered consumer (goal >= 0.5)", "BenchmarkReplay/events", "BenchmarkReplay/raw-ordered"},
		{"durable stream, fsync always vs 2-minute interval", "BenchmarkFsyncPolicy/always/rollout", "BenchmarkFsyncPolicy/interval-2m/rollout"},
		{"reports stream (async persist), fsync always vs interval", "BenchmarkFsyncPolicy/always/reports", "BenchmarkFsyncPolicy/interval-2m/reports"},
	}
)

func record(b *testing.B, events int) {
	b.Helper()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(events)
	b.ReportMetric(1e9/ns, "events/s")
	benchMu.Lock()
	benchNs[b.Name()] = ns
	benchMu.Unlock()
}

func TestMain(m *testing.M) {
	code := m.Run()
	benchMu.Lock()
	defer benchMu.Unlock()
	if len(benchNs) > 0 {
		names := make([]string, 0, len(benchNs))
		for n := range benchNs {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Println("\nevents benchmark figures:")
		for _, n := range names {
			fmt.Printf("  %-45s %10.0f events/s\n", n, 1e9/benchNs[n])
		}
		fmt.Println("ratios (product throughput / raw throughput):")
		for _, r := range ratioSet {
			p, okP := benchNs[r[1]]
			raw, okR := benchNs[r[2]]
			if okP && okR {
				fmt.Printf("  %-50s %.2fx\n", r[0], raw/p)
			}
		}
	}
	os.Exit(code)
}

// benchContext is a context for a benchmark with a deadline far beyond any
// run, ended when the benchmark ends.
func benchContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	return ctx
}

// benchEvents are workload reports of 100 devices: what Replay reads most.
func benchEvents(b *testing.B, n int) []events.Event {
	b.Helper()
	out := make([]events.Event, n)
	for i := range out {
		out[i] = workload(b, fmt.Sprintf("d%d", i%100), i)
	}
	return out
}

// benchAppends are agent commands to 100 devices: control-plane events on
// an acknowledged stream, what Append writes (reports are never appended:
// devices publish them unacknowledged).
func benchAppends(b *testing.B, n int) []events.Event {
	b.Helper()
	out := make([]events.Event, n)
	for i := range out {
		out[i] = command(b, fmt.Sprintf("d%d", i%100))
	}
	return out
}

func rawMsg(b *testing.B, ev events.Event) *nats.Msg {
	b.Helper()
	subj, _ := ev.Subject()
	payload, err := ev.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	m := nats.NewMsg(subj)
	m.Data = payload
	m.Header.Set(jetstream.MsgIDHeader, ev.ID.String())
	return m
}

// pair times a raw operation and the product's equivalent alternately, so
// that load from elsewhere on the machine hits both alike.
// The order flips on every call so neither side always runs second.
type pair struct {
	raw, product time.Duration
	flip         bool
}

func (p *pair) run(raw, product func()) {
	timed := func(f func(), into *time.Duration) {
		t0 := time.Now()
		f()
		*into += time.Since(t0)
	}
	if p.flip {
		timed(product, &p.product)
		timed(raw, &p.raw)
	} else {
		timed(raw, &p.raw)
		timed(product, &p.product)
	}
	p.flip = !p.flip
}

func (p *pair) report(b *testing.B, rawName, productName string, events int) {
	b.Helper()
	rawNs := float64(p.raw.Nanoseconds()) / float64(events)
	prodNs := float64(p.product.Nanoseconds()) / float64(events)
	b.ReportMetric(1e9/rawNs, "raw-events/s")
	b.ReportMetric(1e9/prodNs, "events/s")
	b.ReportMetric(rawNs/prodNs, "ratio")
	benchMu.Lock()
	benchNs[b.Name()+"/"+rawName] = rawNs
	benchNs[b.Name()+"/"+productName] = prodNs
	benchMu.Unlock()
}

// BenchmarkAppend alternates raw JetStream publishes and events appends of
// the same payloads; one op is one event of each.
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()
	_, st := natstest.Provisioned(b)
	js := st.JetStream()

	b.Run("sync", func(b *testing.B) {
		rawEvs, evs := benchAppends(b, b.N), benchAppends(b, b.N)
		msgs := make([]*nats.Msg, b.N)
		for i, ev := range rawEvs {
			msgs[i] = rawMsg(b, ev)
		}
		var p pair
		b.ResetTimer()
		for i := range b.N {
			p.run(func() {
				if _, err := js.PublishMsg(ctx, msgs[i]); err != nil {
					b.Fatal(err)
				}
			}, func() {
				if _, err := st.Append(ctx, evs[i]); err != nil {
					b.Fatal(err)
				}
			})
		}
		p.report(b, "raw", "events", b.N)
	})
	b.Run("async", func(b *testing.B) {
		const chunk = 1000
		rawEvs, evs := benchAppends(b, b.N), benchAppends(b, b.N)
		var p pair
		b.ResetTimer()
		for lo := 0; lo < b.N; lo += chunk {
			hi := min(lo+chunk, b.N)
			b.StopTimer()
			msgs := make([]*nats.Msg, 0, hi-lo)
			for _, ev := range rawEvs[lo:hi] {
				msgs = append(msgs, rawMsg(b, ev))
			}
			var batch events.Batch
			for _, ev := range evs[lo:hi] {
				batch.Add(ev)
			}
			b.StartTimer()
			p.run(func() {
				futures := make([]jetstream.PubAckFuture, len(msgs))
				for i, m := range msgs {
					f, err := js.PublishMsgAsync(m, jetstream.WithStallWait(5*time.Second))
					if err != nil {
						b.Fatal(err)
					}
					futures[i] = f
				}
				for _, f := range futures {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Fatal(err)
					}
				}
			}, func() {
				if _, err := st.AppendBatch(ctx, &batch); err != nil {
					b.Fatal(err)
				}
			})
		}
		p.report(b, "raw", "events", b.N)
	})
}

// BenchmarkReplay alternates a raw ordered consumer and events.Replay over
// the same 50,000 stored events; one op is one full replay of each.
func BenchmarkReplay(b *testing.B) {
	const n = 50_000
	ctx := benchContext(b) // Report flushes: its context needs a deadline
	_, st := natstest.Provisioned(b)
	if err := st.Report(ctx, benchEvents(b, n)...); err != nil {
		b.Fatal(err)
	}
	filter := "fleet.report.*.workload"
	var p pair
	b.ResetTimer()
	for range b.N {
		p.run(func() {
			cons, err := st.JetStream().OrderedConsumer(ctx, events.StreamReports, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
			if err != nil {
				b.Fatal(err)
			}
			it, err := cons.Messages(jetstream.PullMaxMessages(events.ReplayBatchSize))
			if err != nil {
				b.Fatal(err)
			}
			for got := 0; got < n; got++ {
				m, err := it.Next()
				if err != nil {
					b.Fatal(err)
				}
				if len(m.Data()) == 0 {
					b.Fatal("empty message")
				}
			}
			it.Stop()
		}, func() {
			got := 0
			for _, err := range st.Replay(ctx, filter, events.FromStart()) {
				if err != nil {
					b.Fatal(err)
				}
				got++
			}
			if got != n {
				b.Fatalf("replayed %d, want %d", got, n)
			}
		})
	}
	p.report(b, "raw-ordered", "events", b.N*n)
}

// BenchmarkFsyncPolicy measures the durability trade-off of ADR 0002: sync
// appends to a durable stream (rollout) and reports, each waited for until
// stored, to an async-persist stream (reports) with the server fsyncing
// always, against the server's default 2-minute interval.
func BenchmarkFsyncPolicy(b *testing.B) {
	for _, p := range []struct {
		name string
		sync natsembed.SyncPolicy
	}{{"always", natsembed.DefaultSync}, {"interval-2m", natsembed.FastSync}} {
		for _, kind := range []string{"rollout", "reports"} {
			b.Run(p.name+"/"+kind, func(b *testing.B) {
				ctx := benchContext(b) // Report flushes: its context needs a deadline
				s := natstest.StartWith(b, natsembed.Options{Sync: p.sync})
				st, err := events.NewStore(natstest.Connect(b, s), events.StoreOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
					b.Fatal(err)
				}
				evs := make([]events.Event, b.N)
				for i := range evs {
					if kind == "rollout" {
						evs[i] = transition(b, events.TypeRolloutStarted, int64(i))
					} else {
						evs[i] = workload(b, "d1", i)
					}
				}
				b.ResetTimer()
				for i := range b.N {
					if kind == "reports" {
						if err := st.Report(ctx, evs[i]); err != nil {
							b.Fatal(err)
						}
						continue
					}
					if _, err := st.Append(ctx, evs[i]); err != nil {
						b.Fatal(err)
					}
				}
				record(b, b.N)
			})
		}
	}
}

// BenchmarkDecodeStored is DecodeStored of one workload report, as every
// stream reader decodes each record it reads: the strict reader's
// canonical form, and the same report with a space after each colon, which
// encoding/json decodes.
func BenchmarkDecodeStored(b *testing.B) {
	ev, err := events.New(events.Keys{Device: "edge-00042"}, events.WorkloadStatus{Namespace: "bench", Deployment: "web",
		UID: "5f0c3d6e-0000-4000-8000-000000000001", Generation: 17, RevisionID: "17-0123456789abcdef", Phase: events.WorkloadConverged,
		Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, events.WithCorrelation("5f0c3d6e-0000-4000-8000-000000000001", 17))
	if err != nil {
		b.Fatal(err)
	}
	canon, err := json.Marshal(ev)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		payload []byte
	}{
		{"canonical", canon},
		{"spaced", bytes.ReplaceAll(canon, []byte(`":`), []byte(`": `))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(tc.payload)))
			for b.Loop() {
				if _, err := events.DecodeStored("fleet.report.edge-00042.workload", tc.payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
