package rollouts

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// BenchmarkIntentWriterFlush is the runner's fleet-intent writes of one
// release to 1,000 devices, alone, on a server that syncs every write as
// `fleet dev` runs it: one flush of 1,000 new values (each conditional on
// its key's revision), in atomic batches and one write at a time. It
// reports the time per flush and per device; it asserts no timing.
func BenchmarkIntentWriterFlush(b *testing.B) {
	const devices = 1000
	s := natstest.StartWith(b, natsembed.Options{Sync: natsembed.DefaultSync})
	st, err := events.NewStore(natstest.Connect(b, s), events.StoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name, prefix string
		noBatch      bool
	}{{"in atomic batches", "batched", false}, {"one write at a time", "single", true}} {
		// One writer across the runs of the sub-benchmark: it knows the
		// revisions it wrote.
		w := newIntentWriter(b, st, true)
		w.log = slog.New(slog.NewTextHandler(io.Discard, nil))
		w.noBatch = tc.noBatch
		round := 0
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				round++
				f, dirty := fold{}, map[string]bool{}
				for i := range devices {
					d := fmt.Sprintf("%s-%04d", tc.prefix, i) // keys of its own: a new writer knows none
					f[d] = fmt.Sprintf(`{"device":%q,"round":%d,"name":%q}`, d, round, tc.name)
					dirty[d] = true
				}
				w.flush(context.Background(), f, dirty)
				if len(dirty) != 0 {
					b.Fatalf("%d devices left dirty", len(dirty))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/devices, "µs/device")
		})
	}
}
