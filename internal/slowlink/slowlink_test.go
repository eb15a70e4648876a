package slowlink_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/slowlink"
)

// serveBytes serves payload to every connection on a loopback listener.
func serveBytes(t testing.TB, payload []byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write(payload)
			}()
		}
	}()
	return ln.Addr().String()
}

func start(t testing.TB, o slowlink.Options) *slowlink.Link {
	t.Helper()
	l, err := slowlink.Listen(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return l
}

func fetch(t testing.TB, addr string) ([]byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return io.ReadAll(c)
}

func TestALinkForwardsEveryByteAndTheLossyOneResets(t *testing.T) {
	payload := make([]byte, 256<<10)
	_, _ = rand.Read(payload)
	target := serveBytes(t, payload)
	t.Run("a slow link forwards every byte in order", func(t *testing.T) {
		l := start(t, slowlink.Options{Target: target, BytesPerSecond: 64 << 20})
		got, err := fetch(t, l.Addr())
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("got %d bytes (%v), want the %d sent", len(got), err, len(payload))
		}
	})
	t.Run("a lossy link resets a connection before its end", func(t *testing.T) {
		l := start(t, slowlink.Options{Target: target, BytesPerSecond: 64 << 20, ResetEvery: 64 << 10, Seed: 7})
		got, err := fetch(t, l.Addr())
		if err == nil && len(got) == len(payload) {
			t.Fatal("the whole payload arrived through a link resetting every 64 KiB")
		}
		if !bytes.Equal(got, payload[:len(got)]) {
			t.Error("what arrived is not the payload's beginning")
		}
		if l.Resets() != 1 {
			t.Errorf("%d resets, want 1", l.Resets())
		}
	})
}

func TestBadOptionsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    slowlink.Options
		want string
	}{
		{"a target without a port", slowlink.Options{Target: "localhost", BytesPerSecond: 1}, "target"},
		{"no rate", slowlink.Options{Target: "127.0.0.1:1"}, "bytes per second"},
		{"a negative reset", slowlink.Options{Target: "127.0.0.1:1", BytesPerSecond: 1, ResetEvery: -1}, "reset every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// BenchmarkLinkRate reports the rate a 1 MB/s link gives one download of
// 2 MiB (figures, not assertions).
func BenchmarkLinkRate(b *testing.B) {
	payload := make([]byte, 2<<20)
	target := serveBytes(b, payload)
	l := start(b, slowlink.Options{Target: target, BytesPerSecond: 1 << 20})
	for b.Loop() {
		began := time.Now()
		got, err := fetch(b, l.Addr())
		if err != nil || len(got) != len(payload) {
			b.Fatalf("%d bytes (%v)", len(got), err)
		}
		b.ReportMetric(float64(len(got))/time.Since(began).Seconds()/(1<<20), "MiB/s")
	}
}
