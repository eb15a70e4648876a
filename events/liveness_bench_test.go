package events_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natscluster"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// BenchmarkIdleHeartbeatStoredWrites measures what idle devices' heartbeats
// cost a 3-server R3 cluster that fsyncs every write (ADR 0002), before and
// after ADR 0024, in one run: N devices (FLEET_IDLE_DEVICES, default
// 10,000) each beat once over one heartbeat interval (FLEET_IDLE_WINDOW,
// default 30s, the agent's), first into the stored telemetry stream of
// before (file storage, heartbeats with inventory and containers, the last
// 5 per subject), then into the streams events.Provision makes now
// (heartbeats in FLEET_LIVENESS, memory, the last one per subject). The
// heartbeats are published as devices publish them (core publishes the
// stream never acknowledges), from one connection: the servers' cost of a
// beat does not depend on whose connection it came on.
//
// Reported: messages stored in file-backed streams per second (each one a
// write and an fsync on every replica) and the bytes the three nats-server
// processes wrote to storage per second (/proc/<pid>/io write_bytes), per
// 10,000 devices.
//
//	go test -tags "..." -run '^$' -bench IdleHeartbeatStoredWrites -benchtime 1x ./events/
func BenchmarkIdleHeartbeatStoredWrites(b *testing.B) {
	n := envInt(b, "FLEET_IDLE_DEVICES", 10000)
	window := 30 * time.Second
	if v := os.Getenv("FLEET_IDLE_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("FLEET_IDLE_WINDOW %q: %v", v, err)
		}
		window = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := natscluster.Start(ctx, natscluster.Options{N: 3, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		ev, err := events.New(events.Keys{Device: fmt.Sprintf("edge-%06d", i)}, events.DeviceHeartbeat{AgentVersion: "1.0.0", Uptime: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if msgs[i], err = events.Message(ev); err != nil {
			b.Fatal(err)
		}
	}
	opts := events.ProvisionOptions{Replicas: 3}

	for b.Loop() {
		// Before: heartbeats in the file-backed telemetry stream.
		var before jetstream.StreamConfig
		for _, cfg := range events.StreamConfigs(opts) {
			if cfg.Name == events.StreamTelemetry {
				before = cfg
			}
		}
		before.Subjects = append([]string{"fleet.report.*.heartbeat"}, before.Subjects...)
		if _, err := js.CreateStream(ctx, before); err != nil {
			b.Fatal(err)
		}
		old := idlePhase(b, ctx, c, js, msgs, window)
		if err := js.DeleteStream(ctx, events.StreamTelemetry); err != nil {
			b.Fatal(err)
		}
		// After: the streams of today.
		if err := events.Provision(ctx, js, opts); err != nil {
			b.Fatal(err)
		}
		now := idlePhase(b, ctx, c, js, msgs, window)
		per10k := 10000 / float64(n)
		b.ReportMetric(old.fileMsgs*per10k, "stored-writes/s/10k-before")
		b.ReportMetric(now.fileMsgs*per10k, "stored-writes/s/10k-after")
		b.ReportMetric(old.diskBytes*per10k/1024, "disk-KiB/s/10k-before")
		b.ReportMetric(now.diskBytes*per10k/1024, "disk-KiB/s/10k-after")
		fmt.Printf("goal        idle heartbeats cost no stored write (ADR 0024): %.0f stored writes/s per 10,000 idle devices (%.0f before): %s\n",
			now.fileMsgs*per10k, old.fileMsgs*per10k, map[bool]string{true: "met", false: "NOT met"}[now.fileMsgs*per10k < 1])
		b.Logf("%d idle devices, one beat each over %s, 3 servers, R3, fsync always:", n, window)
		b.Logf("  before (FLEET_TELEMETRY, file): %.0f stored writes/s, %.0f KiB/s written by the servers (%.0f and %.0f per 10,000 devices)",
			old.fileMsgs, old.diskBytes/1024, old.fileMsgs*per10k, old.diskBytes*per10k/1024)
		b.Logf("  after  (FLEET_LIVENESS, memory): %.0f stored writes/s, %.0f KiB/s written by the servers, %.0f beats/s held in memory (%.0f, %.0f, per 10,000 devices)",
			now.fileMsgs, now.diskBytes/1024, now.memMsgs, now.fileMsgs*per10k, now.diskBytes*per10k/1024)
	}
}

// idleFigures are one phase's rates per second of its window.
type idleFigures struct {
	fileMsgs, memMsgs, diskBytes float64
}

// idlePhase publishes every heartbeat once, spread evenly over window,
// waits until the streams hold them, and returns the rates.
func idlePhase(b *testing.B, ctx context.Context, c *natscluster.Cluster, js jetstream.JetStream, msgs []*nats.Msg, window time.Duration) idleFigures {
	b.Helper()
	file0, mem0 := storedBy(b, ctx, js)
	disk0 := serverWriteBytes(b, c)
	start := time.Now()
	// Every 10 ms, the heartbeats due by then.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < len(msgs); {
		due := min(len(msgs), int(float64(len(msgs))*time.Since(start).Seconds()/window.Seconds())+1)
		for ; i < due; i++ {
			if err := js.Conn().PublishMsg(msgs[i]); err != nil {
				b.Fatal(err)
			}
		}
		if i < len(msgs) {
			<-tick.C
		}
	}
	if err := js.Conn().FlushTimeout(time.Minute); err != nil {
		b.Fatal(err)
	}
	var file, mem uint64
	if err := testenv.Poll(ctx, 2*time.Minute, func() bool {
		file, mem = storedBy(b, ctx, js)
		return (file-file0)+(mem-mem0) >= uint64(len(msgs))
	}); err != nil {
		b.Fatalf("%v: the streams took %d of %d heartbeats", err, (file-file0)+(mem-mem0), len(msgs))
	}
	took := time.Since(start).Seconds()
	disk := serverWriteBytes(b, c) - disk0
	return idleFigures{fileMsgs: float64(file-file0) / took, memMsgs: float64(mem-mem0) / took, diskBytes: float64(disk) / took}
}

// storedBy sums the last sequences of the file-backed and the memory
// streams.
func storedBy(b *testing.B, ctx context.Context, js jetstream.JetStream) (file, mem uint64) {
	b.Helper()
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		info := s.CachedInfo()
		if info.Config.Storage == jetstream.MemoryStorage {
			mem += info.State.LastSeq
		} else {
			file += info.State.LastSeq
		}
	}
	if err := names.Err(); err != nil {
		b.Fatal(err)
	}
	return file, mem
}

// serverWriteBytes sums write_bytes of /proc/<pid>/io over the servers.
func serverWriteBytes(b *testing.B, c *natscluster.Cluster) uint64 {
	b.Helper()
	var sum uint64
	for i := range c.N() {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", c.PID(i)))
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				sum += n
			}
		}
	}
	return sum
}

func envInt(b *testing.B, name string, def int) int {
	b.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s %q: want a positive count", name, v)
	}
	return n
}
