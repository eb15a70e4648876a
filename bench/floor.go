package bench

import (
	"context"
	"fmt"
	"sync/atomic"
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
	// The answers are subscribed to once, before the warm-up: on a cluster
	// a subscription made just before a round would reach the other
	// servers over the routes a moment after their subscribers answer, and
	// their answers would reach nobody. Once the warm-up saw every answer,
	// every server knows of these subscriptions.
	ans, err := b.subscribeFloorAnswers()
	if err != nil {
		return err
	}
	defer ans.stop()
	if err := b.warmFloor(ctx, ans, n, padding); err != nil {
		return err
	}
	var second, storedSecond time.Duration
	rounds := []struct{ core, stored *time.Duration }{
		{&res.FloorAsync, &res.FloorStoredAsync}, {&res.FloorSync, &res.FloorStoredSync}, {&second, &storedSecond},
	}
	for round, into := range rounds {
		tag := fmt.Sprintf("r%d-%s", round, randomToken()[:8])
		value := append([]byte(tag+"|"), padding...)
		w := ans.watch(n, tag)
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
	tag          string
	core, stored *counter
	answers      *floorAnswers
}

// stop ends the round: later answers are counted by no watch.
func (w *floorWatch) stop() { w.answers.current.CompareAndSwap(w, nil) }

// floorAnswers are the subscriptions to the floor subscribers' answers,
// made once for the whole floor phase; each answer is counted by the
// round's watch when it carries the round's tag.
type floorAnswers struct {
	subs    []*nats.Subscription
	current atomic.Pointer[floorWatch]
}

func (a *floorAnswers) stop() {
	for _, s := range a.subs {
		_ = s.Unsubscribe()
	}
}

// watch starts a round whose values are tagged tag.
func (a *floorAnswers) watch(n int, tag string) *floorWatch {
	w := &floorWatch{tag: tag, core: newCounter(n), stored: newCounter(n), answers: a}
	a.current.Store(w)
	return w
}

// subscribeFloorAnswers subscribes to the answers to the floor's values.
func (b *bench) subscribeFloorAnswers() (*floorAnswers, error) {
	a := &floorAnswers{}
	for prefix, stored := range map[string]bool{floorAckPrefix: false, floorStoredAckPrefix: true} {
		s, err := b.cp.monitor.Subscribe(prefix+"*", func(m *nats.Msg) {
			w := a.current.Load()
			if w == nil || string(m.Data) != w.tag {
				return
			}
			c := w.core
			if stored {
				c = w.stored
			}
			c.see(token(m.Subject, 3))
		})
		if err != nil {
			a.stop()
			return nil, fmt.Errorf("scalebench: %w", err)
		}
		a.subs = append(a.subs, s)
		if err := s.SetPendingLimits(-1, -1); err != nil {
			a.stop()
			return nil, fmt.Errorf("scalebench: %w", err)
		}
	}
	if err := b.cp.monitor.Flush(); err != nil {
		a.stop()
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	return a, nil
}

// warmFloor puts an untimed value to every floor subscriber, again to
// those that did not answer both copies within a second, until all did (at
// most Options.Timeout). A subscriber is ready once its own server has its
// subscriptions; on a cluster the other servers learn of them a moment
// later, over the routes, and a value published before that reaches nobody.
func (b *bench) warmFloor(ctx context.Context, ans *floorAnswers, n int, padding []byte) error {
	tag := "warm-" + randomToken()[:8]
	value := append([]byte(tag+"|"), padding...)
	w := ans.watch(n, tag)
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
