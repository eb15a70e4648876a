// Package slowlink is a TCP proxy on loopback that makes a link slow and,
// optionally, lossy: a test harness for measuring what a device on a
// cellular or shared uplink sees (issue #37). Every byte from the target to
// the client passes through one bucket per Link, so the Link's rate is the
// device's whole downlink whatever the number of connections; the lossy
// variant resets a connection now and then, as a flaky uplink does.
//
// It is linked by no package, only tests and benchmarks.
package slowlink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Options configure a Link.
type Options struct {
	// Target is the host:port the Link forwards to.
	Target string
	// BytesPerSecond bounds what the target sends to the clients, all
	// connections together (the device's downlink). Required.
	BytesPerSecond int64
	// ResetEvery, when above 0, resets a connection (TCP RST) after about
	// that many bytes sent to the client, at random between half and one
	// and a half times it: the lossy variant. 0: never.
	ResetEvery int64
	// Seed seeds the lossy variant's choices (0: from the clock).
	Seed uint64
	// Logger receives one line per reset; nil: none.
	Logger *slog.Logger
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(o.Target); err != nil {
		errs = append(errs, fmt.Errorf("slowlink: target %q: %w: use host:port", o.Target, err))
	}
	if o.BytesPerSecond <= 0 {
		errs = append(errs, fmt.Errorf("slowlink: bytes per second is %d: use a positive rate", o.BytesPerSecond))
	}
	if o.ResetEvery < 0 {
		errs = append(errs, fmt.Errorf("slowlink: reset every %d bytes: use 0 (never) or a positive count", o.ResetEvery))
	}
	return errors.Join(errs...)
}

// chunk is how many bytes the Link forwards at a time.
const chunk = 16 << 10

// Link is one slow link: a listener on 127.0.0.1 forwarding to the target.
type Link struct {
	o  Options
	ln net.Listener

	mu   sync.Mutex
	next time.Time // when the bucket has room for the next chunk
	rng  *rand.Rand
	// Resets counts the connections the lossy variant reset.
	resets int
	conns  sync.WaitGroup
}

// Listen opens the Link's listener on a free loopback port.
func Listen(o Options) (*Link, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("slowlink: listen: %w", err)
	}
	seed := o.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &Link{o: o, ln: ln, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}, nil
}

// Addr is the host:port clients connect to.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Resets is how many connections the lossy variant reset so far.
func (l *Link) Resets() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resets
}

// Run forwards connections until ctx ends, then closes the listener and
// every connection and returns nil.
func (l *Link) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = l.ln.Close() })
	defer stop()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				l.conns.Wait()
				return nil
			}
			return fmt.Errorf("slowlink: accept: %w", err)
		}
		l.conns.Go(func() { l.serve(ctx, c) })
	}
}

// serve forwards one connection: client → target at full speed, target →
// client through the bucket.
func (l *Link) serve(ctx context.Context, client net.Conn) {
	defer client.Close()
	var d net.Dialer
	target, err := d.DialContext(ctx, "tcp", l.o.Target)
	if err != nil {
		return
	}
	defer target.Close()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	context.AfterFunc(cctx, func() {
		_ = client.Close()
		_ = target.Close()
	})
	go func() {
		_, _ = io.Copy(target, client)
		cancel()
	}()
	budget := l.resetBudget()
	buf := make([]byte, chunk)
	var sent int64
	for {
		n, err := target.Read(buf)
		if n > 0 {
			if !l.wait(cctx, n) {
				return
			}
			if budget > 0 && sent+int64(n) > budget {
				l.reset(client, sent)
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
			sent += int64(n)
		}
		if err != nil {
			return
		}
	}
}

// resetBudget is how many bytes a new connection may carry before the
// lossy variant resets it (0: never).
func (l *Link) resetBudget() int64 {
	if l.o.ResetEvery <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.o.ResetEvery/2 + l.rng.Int64N(l.o.ResetEvery+1)
}

// reset closes client with a TCP RST.
func (l *Link) reset(client net.Conn, sent int64) {
	l.mu.Lock()
	l.resets++
	l.mu.Unlock()
	if tc, ok := client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	if l.o.Logger != nil {
		l.o.Logger.Info("slowlink: connection reset", "after", sent)
	}
}

// wait takes n bytes from the bucket, waiting until the link's rate allows
// them; false when ctx ended first.
func (l *Link) wait(ctx context.Context, n int) bool {
	l.mu.Lock()
	now := time.Now()
	at := l.next
	if at.Before(now) {
		at = now
	}
	l.next = at.Add(time.Duration(float64(n) / float64(l.o.BytesPerSecond) * float64(time.Second)))
	l.mu.Unlock()
	d := time.Until(at)
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
