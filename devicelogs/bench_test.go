package devicelogs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// standIn answers every logs command of device on srv with one chunk of
// lines that ends the stream (answer false: never answers).
func standIn(b *testing.B, nc *nats.Conn, device string, answer bool) {
	subj, _ := events.CommandSubject(device)
	chunk := events.LogsChunk{Seq: 1, End: true, Lines: lines(10, "GET /api/analysis/%d 200 "+fmt.Sprint(device))}
	body, _ := json.Marshal(chunk)
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		ev, err := events.DecodeStored(m.Subject, m.Data)
		if err != nil {
			return
		}
		cmd, err := events.Decode[events.AgentCommand](ev)
		if err != nil || cmd.Command != events.CommandLogs || cmd.Logs == nil || !answer {
			return
		}
		to, _ := events.LogsSubject(device, cmd.Logs.Reader, cmd.Logs.Request)
		_ = nc.Publish(to, body)
	}); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOpenReadClose is the control plane's cost of one request:
// audit record, command, subscription, one chunk of 10 lines, close.
func BenchmarkOpenReadClose(b *testing.B) {
	srv, st := natstest.Provisioned(b)
	standIn(b, natstest.Connect(b, srv), "dev-a", true)
	rd, err := devicelogs.New(devicelogs.Options{Conn: natstest.Connect(b, srv), Store: st})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	r := request("dev-a")
	b.ReportAllocs()
	for b.Loop() {
		s, err := rd.Open(ctx, r, allow)
		if err != nil {
			b.Fatal(err)
		}
		for {
			_, err := s.Next(ctx)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		_ = s.Close()
	}
}

// BenchmarkHeldStreams holds 100 open follow streams (4 of each of 25
// devices, never answered) and reports what one costs the reader's
// process: heap bytes and goroutines per stream (the subscription is per
// device: 25 for 100 streams).
func BenchmarkHeldStreams(b *testing.B) {
	srv, st := natstest.Provisioned(b)
	dev := natstest.Connect(b, srv)
	const devices, perDevice = 25, 4
	for d := range devices {
		standIn(b, dev, fmt.Sprintf("dev-%d", d), false)
	}
	ctx := context.Background()
	for b.Loop() {
		rd, err := devicelogs.New(devicelogs.Options{Conn: natstest.Connect(b, srv), Store: st})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		g0 := runtime.NumGoroutine()
		var open []*devicelogs.Stream
		for d := range devices {
			for range perDevice {
				r := request(fmt.Sprintf("dev-%d", d))
				r.Follow = true
				s, err := rd.Open(ctx, r, allow)
				if err != nil {
					b.Fatal(err)
				}
				open = append(open, s)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		n := float64(len(open))
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heapB/stream")
		b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/stream")
		for _, s := range open {
			_ = s.Close()
		}
	}
}
