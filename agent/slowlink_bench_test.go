package agent_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/slowlink"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/score"
)

var (
	slowImageMiB = flag.Int("slowlink.image-mib", 8, "BenchmarkReleaseOverASlowLink: the new image's size in MiB (issue #37: 50)")
	slowDevices  = flag.Int("slowlink.devices", 3, "BenchmarkReleaseOverASlowLink: simulated devices, each behind its own link")
	slowRate     = flag.Int64("slowlink.rate", 1<<20, "BenchmarkReleaseOverASlowLink: each device's downlink in bytes per second")
)

// slowPull is the simulated runtime of one device whose pulls download the
// image's bytes through the device's slow link (resuming with a Range
// request after a reset) before the image is present.
type slowPull struct {
	*sim.Runtime
	link string
	size int64
}

func (s *slowPull) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	if _, err := slowlink.Fetch(ctx, s.link, s.size); err != nil {
		return err
	}
	return s.Runtime.Pull(ctx, ref, auth)
}

// BenchmarkReleaseOverASlowLink measures release → Converged of simulated
// devices each behind a rate-limited link (internal/slowlink, and its
// lossy variant), with and without the images fetched ahead (ADR 0027):
// the agents run for real (intent from the fleet-intent bucket, reports to
// the streams); the release is the write of every device's value naming
// the new revision. Figures, not assertions:
//
//	go test -tags '…' -run '^$' -bench ReleaseOverASlowLink -benchtime 1x ./agent -slowlink.image-mib 50
func BenchmarkReleaseOverASlowLink(b *testing.B) {
	size := int64(*slowImageMiB) << 20
	blob, err := slowlink.ServeBlob(size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = blob.Close() })

	for _, link := range []struct {
		name       string
		resetEvery int64
	}{{"steady", 0}, {"lossy", 4 << 20}} {
		for _, prefetch := range []bool{false, true} {
			b.Run(fmt.Sprintf("link=%s/prefetch=%t", link.name, prefetch), func(b *testing.B) {
				for range b.N {
					d := releaseOverSlowLinks(b, blob.Addr(), size, link.resetEvery, prefetch)
					b.ReportMetric(d.Seconds(), "release-to-converged-s")
				}
			})
		}
	}
}

// releaseOverSlowLinks runs one release of *slowDevices devices and
// returns the time from the release to the last device's Converged.
func releaseOverSlowLinks(b *testing.B, blobAddr string, size, resetEvery int64, prefetch bool) time.Duration {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	srv, st := natstest.Provisioned(b)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		b.Fatal(err)
	}
	const oldImage, newImage = "reg.example/api:v1", "reg.example/api:v2"
	entry := func(gen int64, image string) events.IntentEntry {
		raw, _ := json.Marshal(score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: image}}}})
		return events.IntentEntry{Namespace: "lab", Name: "api", UID: "u", Generation: gen, RevisionID: fmt.Sprintf("%d-r", gen), Score: raw}
	}
	put := func(dev string, v events.DeviceIntent) {
		v.Device = dev
		if v.Deployments == nil {
			v.Deployments = []events.IntentEntry{}
		}
		raw, _ := json.Marshal(v)
		if _, err := kv.Put(ctx, dev, raw); err != nil {
			b.Fatal(err)
		}
	}
	var devices []string
	for i := range *slowDevices {
		dev := fmt.Sprintf("slow-%d", i)
		devices = append(devices, dev)
		l, err := slowlink.Listen(slowlink.Options{Target: blobAddr, BytesPerSecond: *slowRate, ResetEvery: resetEvery, Seed: uint64(i + 1)})
		if err != nil {
			b.Fatal(err)
		}
		lctx, stop := context.WithCancel(ctx)
		go func() { _ = l.Run(lctx) }()
		rt := &slowPull{Runtime: sim.New(sim.Options{LocalImages: []string{oldImage},
			Registry: map[string]sim.RegistryImage{oldImage: {}, newImage: {}}}), link: l.Addr(), size: size}
		nc := natstest.Connect(b, srv, nats.CustomInboxPrefix("_INBOX_"+dev))
		actx, stopAgent := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- agent.Run(actx, agent.Options{Device: dev, Conn: nc, HeartbeatInterval: time.Hour, Reconciler: &agent.Reconciler{Runtime: rt, Device: dev}})
		}()
		b.Cleanup(func() { stopAgent(); <-done; stop() })
		put(dev, events.DeviceIntent{Deployments: []events.IntentEntry{entry(1, oldImage)}})
	}
	reported := func(kind, dev string, ok func(events.Event) bool) bool {
		for r, err := range st.Replay(ctx, "fleet.report."+dev+"."+kind, events.FromStart()) {
			if err != nil {
				return false
			}
			if ok(r.Event) {
				return true
			}
		}
		return false
	}
	converged := func(gen int64) func() bool {
		return func() bool {
			for _, dev := range devices {
				if !reported("workload", dev, func(ev events.Event) bool {
					ws, err := events.Decode[events.WorkloadStatus](ev)
					return err == nil && ws.Generation == gen && ws.Phase == events.WorkloadConverged
				}) {
					return false
				}
			}
			return true
		}
	}
	if err := testenv.Poll(ctx, 5*time.Minute, converged(1)); err != nil {
		b.Fatalf("generation 1 never converged: %v", err)
	}
	if prefetch {
		e2 := entry(2, newImage)
		fetchStarted := time.Now()
		for _, dev := range devices {
			put(dev, events.DeviceIntent{Deployments: []events.IntentEntry{entry(1, oldImage)},
				Fetch: []events.FetchEntry{{Namespace: e2.Namespace, Name: e2.Name, UID: e2.UID, Generation: 2, RevisionID: e2.RevisionID, Score: e2.Score}}})
		}
		if err := testenv.Poll(ctx, 10*time.Minute, func() bool {
			for _, dev := range devices {
				if !reported("fetch", dev, func(ev events.Event) bool {
					f, err := events.Decode[events.WorkloadFetch](ev)
					return err == nil && f.Phase == events.FetchDone
				}) {
					return false
				}
			}
			return true
		}); err != nil {
			b.Fatalf("the fetch never ended: %v", err)
		}
		b.Logf("fetch ahead of %d devices took %s", len(devices), time.Since(fetchStarted).Round(time.Millisecond))
	}
	b.StartTimer()
	released := time.Now()
	for _, dev := range devices {
		put(dev, events.DeviceIntent{Deployments: []events.IntentEntry{entry(2, newImage)}})
	}
	if err := testenv.Poll(ctx, 10*time.Minute, converged(2)); err != nil {
		b.Fatalf("generation 2 never converged: %v", err)
	}
	return time.Since(released)
}
