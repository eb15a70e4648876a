package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// floor measures the raw floor: plain subscribers (no product code, floor
// user, no callout) core-subscribed to their own key of a bucket configured
// like fleet-intent; N puts of a value the size of a device's intent; each
// subscriber answers; the time until every answer is seen. Asynchronous
// puts (the floor), then synchronous puts one after the other (as the
// runner writes), then asynchronous puts again.
func (b *bench) floor(ctx context.Context, n int, res *Result) error {
	cp, o := b.cp, b.o
	entry, err := cp.intent.Get(ctx, DeviceName(1))
	if err != nil {
		return fmt.Errorf("scalebench: read a device's intent: %w", err)
	}
	padding := entry.Value()
	window := time.Duration(float64(n) / o.FloorRate * float64(time.Second))
	subs, err := b.children(modeFloor, n, window, envFloorPassword+"="+cp.sec.floorPassword)
	if err != nil {
		return err
	}
	defer stopChildren(subs)
	if _, err := awaitReady(ctx, subs, window+o.Timeout); err != nil {
		return err
	}
	if err := b.warmFloor(ctx, n, padding); err != nil {
		return err
	}
	var second, storedSecond time.Duration
	rounds := []struct{ core, stored *time.Duration }{
		{&res.FloorAsync, &res.FloorStoredAsync}, {&res.FloorSync, &res.FloorStoredSync}, {&second, &storedSecond},
	}
	for round, into := range rounds {
		tag := fmt.Sprintf("r%d-%s", round, randomToken()[:8])
		value := append([]byte(tag+"|"), padding...)
		w, err := b.watchFloor(n, tag)
		if err != nil {
			return err
		}
		began := time.Now()
		if round == 1 {
			err = b.putSync(ctx, n, value)
		} else {
			err = b.putAsync(ctx, n, value)
		}
		if err == nil {
			err = await(ctx, w.core, o.Timeout, "floor answers")
		}
		if err == nil {
			err = await(ctx, w.stored, o.Timeout, "floor answers to the stored values")
		}
		w.stop()
		if err != nil {
			return err
		}
		_, last := w.core.state()
		*into.core = last.Sub(began)
		_, last = w.stored.state()
		*into.stored = last.Sub(began)
	}
	res.FloorAsyncRounds = [2]time.Duration{res.FloorAsync, second}
	res.FloorAsync = min(res.FloorAsync, second)
	res.FloorStoredAsync = min(res.FloorStoredAsync, storedSecond)
	return stopChildren(subs)
}

// floorWatch counts the floor subscribers' answers of one round: to the
// value as published (core) and to its copy republished once stored.
type floorWatch struct {
	core, stored *counter
	subs         []*nats.Subscription
}

func (w floorWatch) stop() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

// watchFloor subscribes to the answers to the values tagged tag.
func (b *bench) watchFloor(n int, tag string) (floorWatch, error) {
	w := floorWatch{core: newCounter(n), stored: newCounter(n)}
	for prefix, c := range map[string]*counter{floorAckPrefix: w.core, floorStoredAckPrefix: w.stored} {
		s, err := b.cp.monitor.Subscribe(prefix+"*", func(m *nats.Msg) {
			if string(m.Data) == tag {
				c.see(token(m.Subject, 3))
			}
		})
		if err != nil {
			w.stop()
			return w, fmt.Errorf("scalebench: %w", err)
		}
		w.subs = append(w.subs, s)
		if err := s.SetPendingLimits(-1, -1); err != nil {
			w.stop()
			return w, fmt.Errorf("scalebench: %w", err)
		}
	}
	if err := b.cp.monitor.Flush(); err != nil {
		w.stop()
		return w, fmt.Errorf("scalebench: %w", err)
	}
	return w, nil
}

// warmFloor puts an untimed value to every floor subscriber, again to
// those that did not answer both copies within a second, until all did (at
// most Options.Timeout). A subscriber is ready once its own server has its
// subscriptions; on a cluster the other servers learn of them a moment
// later, over the routes, and a value published before that reaches nobody.
func (b *bench) warmFloor(ctx context.Context, n int, padding []byte) error {
	tag := "warm-" + randomToken()[:8]
	value := append([]byte(tag+"|"), padding...)
	w, err := b.watchFloor(n, tag)
	if err != nil {
		return err
	}
	defer w.stop()
	deadline := time.Now().Add(b.o.Timeout)
	missing := make([]int, n)
	for i := range missing {
		missing[i] = i + 1
	}
	for len(missing) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: floor subscribers answering a value: %d of %d did not after %s", ErrIncomplete, len(missing), n, b.o.Timeout)
		}
		for _, i := range missing {
			if err := b.publishFloor(i, value); err != nil {
				return err
			}
		}
		if err := b.floorPublished(ctx); err != nil {
			return err
		}
		wait := time.NewTimer(time.Second)
		select {
		case <-w.stored.done:
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
		wait.Stop()
		missing = missing[:0]
		for i := 1; i <= n; i++ {
			if !w.core.has(DeviceName(i)) || !w.stored.has(DeviceName(i)) {
				missing = append(missing, i)
			}
		}
	}
	return nil
}

func (b *bench) putAsync(ctx context.Context, n int, value []byte) error {
	for i := 1; i <= n; i++ {
		if err := b.publishFloor(i, value); err != nil {
			return err
		}
	}
	return b.floorPublished(ctx)
}

// publishFloor puts value to device i's floor key asynchronously.
func (b *bench) publishFloor(i int, value []byte) error {
	if _, err := b.cp.floorJS.PublishAsync("$KV."+floorBucket+"."+DeviceName(i), value, jetstream.WithStallWait(5*time.Second)); err != nil {
		return fmt.Errorf("scalebench: floor put: %w", err)
	}
	return nil
}

// floorPublished waits until every asynchronous floor put was acknowledged.
func (b *bench) floorPublished(ctx context.Context) error {
	select {
	case <-b.cp.floorJS.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *bench) putSync(ctx context.Context, n int, value []byte) error {
	for i := 1; i <= n; i++ {
		if _, err := b.cp.floorKV.Put(ctx, DeviceName(i), value); err != nil {
			return fmt.Errorf("scalebench: floor put: %w", err)
		}
	}
	return nil
}
