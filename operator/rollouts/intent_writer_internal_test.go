package rollouts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/operator/internal/kvstore"
)

// fold is a fold's fleet-intent values, for the writer alone.
type fold map[string]string

func (f fold) Devices() []string { return slices.Sorted(maps.Keys(f)) }
func (f fold) Value(dev string) ([]byte, bool) {
	v, ok := f[dev]
	return []byte(v), ok
}

// newIntentWriter is one operator replica's fleet-intent writer on the
// provisioned bucket; async chooses the windowed asynchronous writes the
// runner uses when it has a JetStream context.
func newIntentWriter(t testing.TB, st *events.Store, async bool) *intentWriter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	w := &intentWriter{kv: kv, log: slog.New(slog.NewTextHandler(io.Discard, nil)), written: map[string]kvSlot{}}
	if async {
		w.js = st.JetStream()
	}
	return w
}

// bucketValue is what fleet-intent holds for dev ("" for no key).
func bucketValue(t *testing.T, w *intentWriter, dev string) string {
	t.Helper()
	e, err := w.kv.Get(context.Background(), dev)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(e.Value())
}

func flushAll(w *intentWriter, f fold, devs ...string) map[string]bool {
	dirty := map[string]bool{}
	for _, d := range devs {
		dirty[d] = true
	}
	w.flush(context.Background(), f, dirty)
	return dirty
}

// TestTheIntentWriterNeverOverwritesAValueItHasNotSeen is the guard
// against a deposed operator leader that has not exited yet: every write
// is conditional on the key's revision, so a replica folding an older
// state loses against the one that wrote a newer value, and the writer
// that lost re-reads and converges instead of fighting blind.
func TestTheIntentWriterNeverOverwritesAValueItHasNotSeen(t *testing.T) {
	for _, async := range []bool{true, false} {
		t.Run(fmt.Sprintf("async writes %v", async), func(t *testing.T) {
			_, st := natstest.Provisioned(t)
			ctx := context.Background()

			t.Run("a deposed leader's older fold loses against the new leader's write", func(t *testing.T) {
				old, cur := newIntentWriter(t, st, async), newIntentWriter(t, st, async)
				if left := flushAll(old, fold{"d1": `{"v":1}`}, "d1"); len(left) != 0 {
					t.Fatalf("the first write left %v dirty", left)
				}
				// The new leader starts: it reads the bucket, then writes
				// its newer fold.
				if err := cur.sync(ctx, fold{"d1": `{"v":2}`}, map[string]bool{}); err != nil {
					t.Fatal(err)
				}
				if got := bucketValue(t, cur, "d1"); got != `{"v":2}` {
					t.Fatalf("after the new leader's sync d1 holds %s, want v2", got)
				}
				// The deposed leader folds one more (older) state and writes.
				left := flushAll(old, fold{"d1": `{"v":1.5}`}, "d1")
				if got := bucketValue(t, cur, "d1"); got != `{"v":2}` {
					t.Errorf("the deposed leader overwrote the new leader's value: d1 holds %s", got)
				}
				if !left["d1"] {
					t.Error("the deposed leader's refused write left d1 clean: it must stay dirty")
				}
				if got := old.written["d1"].val; got != `{"v":2}` {
					t.Errorf("the deposed leader did not re-read d1 after the conflict: it knows %q", got)
				}
			})

			t.Run("a key deleted before the writer started is written in one flush", func(t *testing.T) {
				w := newIntentWriter(t, st, async)
				flushAll(w, fold{"d2": `{"v":1}`}, "d2")
				if left := flushAll(w, fold{}, "d2"); len(left) != 0 {
					t.Fatalf("the delete left %v dirty", left)
				}
				if got := bucketValue(t, w, "d2"); got != "" {
					t.Fatalf("d2 holds %s after the delete", got)
				}
				fresh := newIntentWriter(t, st, async) // a restart: the delete marker is not listed
				if err := fresh.sync(ctx, fold{}, map[string]bool{}); err != nil {
					t.Fatal(err)
				}
				if left := flushAll(fresh, fold{"d2": `{"v":2}`}, "d2"); len(left) != 0 {
					t.Errorf("the write over a delete marker left %v dirty after one flush", left)
				}
				if got := bucketValue(t, w, "d2"); got != `{"v":2}` {
					t.Errorf("d2 holds %q, want v2", got)
				}
			})

			t.Run("a write by another replica is re-read and the fold's value written over it", func(t *testing.T) {
				w, other := newIntentWriter(t, st, async), newIntentWriter(t, st, async)
				flushAll(w, fold{"d3": `{"v":1}`}, "d3")
				if err := other.sync(ctx, fold{"d3": `{"v":"foreign"}`}, map[string]bool{}); err != nil {
					t.Fatal(err)
				}
				left := flushAll(w, fold{"d3": `{"v":3}`}, "d3")
				if !left["d3"] {
					t.Error("the write that conflicted with a foreign value left d3 clean: it must stay dirty for the next flush")
				}
				if got := bucketValue(t, w, "d3"); got != `{"v":"foreign"}` {
					t.Errorf("d3 holds %s right after the conflict; the other writer's value must stand until the next flush", got)
				}
				w.flush(ctx, fold{"d3": `{"v":3}`}, left)
				if len(left) != 0 {
					t.Errorf("the next flush left %v dirty", left)
				}
				if got := bucketValue(t, w, "d3"); got != `{"v":3}` {
					t.Errorf("d3 holds %s, want the writer's fold v3", got)
				}
			})

			t.Run("a delete conditional on a revision another replica moved does not delete its value", func(t *testing.T) {
				w, other := newIntentWriter(t, st, async), newIntentWriter(t, st, async)
				flushAll(w, fold{"d4": `{"v":1}`}, "d4")
				if err := other.sync(ctx, fold{"d4": `{"v":2}`}, map[string]bool{}); err != nil {
					t.Fatal(err)
				}
				// w's fold has nothing for d4; its delete conflicts and
				// leaves the other's value; the next flush deletes the
				// value it now has seen.
				left := flushAll(w, fold{}, "d4")
				if got := bucketValue(t, w, "d4"); got != `{"v":2}` || !left["d4"] {
					t.Errorf("after the conflicting delete d4 holds %q (dirty %v); want the other writer's value, still dirty", got, left["d4"])
				}
				w.flush(ctx, fold{}, left)
				if len(left) != 0 {
					t.Errorf("the next flush left %v dirty", left)
				}
				if got := bucketValue(t, w, "d4"); got != "" {
					t.Errorf("d4 holds %s: the writer's fold has nothing for it", got)
				}
			})

			t.Run("the watch tells the writer's own writes from another writer's, which the next flush repairs", func(t *testing.T) {
				w, other := newIntentWriter(t, st, true), newIntentWriter(t, st, async)
				wctx, cancel := context.WithCancel(ctx)
				defer cancel()
				updates := make(chan kvUpdate, 16)
				if err := w.watch(wctx, updates); err != nil {
					t.Fatal(err)
				}
				next := func() kvUpdate {
					t.Helper()
					select {
					case u := <-updates:
						return u
					case <-time.After(30 * time.Second):
						t.Fatal("the watch saw no write in 30s")
						return kvUpdate{}
					}
				}
				f := fold{"d5": `{"v":1}`}
				flushAll(w, f, "d5")
				dirty := map[string]bool{}
				if u := next(); w.foreign(ctx, u, dirty) || len(dirty) != 0 {
					t.Fatalf("the writer's own write %+v was taken for another's (dirty %v)", u, dirty)
				}
				if err := other.sync(ctx, fold{"d5": `{"v":"stale"}`}, map[string]bool{}); err != nil {
					t.Fatal(err)
				}
				if u := next(); !w.foreign(ctx, u, dirty) || !dirty["d5"] {
					t.Fatalf("another writer's write %+v was not noticed (dirty %v)", u, dirty)
				}
				w.flush(ctx, f, dirty)
				if got := bucketValue(t, w, "d5"); got != `{"v":1}` || len(dirty) != 0 {
					t.Errorf("after the repair d5 holds %s (dirty %v); want the writer's fold v1", got, dirty)
				}
			})
		})
	}
}

// manyDevices is a fold of n devices named prefix-0000…, each value naming
// its round.
func manyDevices(prefix string, n int, round string) (fold, []string) {
	f := fold{}
	devs := make([]string, n)
	for i := range n {
		devs[i] = fmt.Sprintf("%s-%04d", prefix, i)
		f[devs[i]] = fmt.Sprintf(`{"device":%q,"round":%q}`, devs[i], round)
	}
	return f, devs
}

// TestTheIntentWriterWritesAReleaseInAtomicBatches: a flush of many
// devices goes in atomic batches, each write of them still conditional on
// its key's revision; a batch the stream refuses is written one value at a
// time, so a conflict on one key never blocks the others.
func TestTheIntentWriterWritesAReleaseInAtomicBatches(t *testing.T) {
	_, st := natstest.Provisioned(t)
	ctx := context.Background()
	n := 2*kvBatch + kvBatch/3 // batches in flight, and a short last one

	t.Run("every value is written and known at the revision the bucket gave it", func(t *testing.T) {
		w := newIntentWriter(t, st, true)
		for _, round := range []string{"first", "second"} {
			f, devs := manyDevices("a", n, round)
			if left := flushAll(w, f, devs...); len(left) != 0 {
				t.Fatalf("round %s left %d devices dirty", round, len(left))
			}
			for _, d := range devs {
				e, err := w.kv.Get(ctx, d)
				if err != nil {
					t.Fatalf("round %s: %s: %v", round, d, err)
				}
				if got, want := string(e.Value()), f[d]; got != want {
					t.Fatalf("round %s: %s holds %s, want %s", round, d, got, want)
				}
				if slot := w.written[d]; slot.rev != e.Revision() || slot.val != f[d] {
					t.Fatalf("round %s: the writer knows %s at revision %d (%q), the bucket holds revision %d",
						round, d, slot.rev, slot.val, e.Revision())
				}
			}
		}
		if w.noBatch {
			t.Error("the writer stopped batching on a bucket provisioned for it")
		}
	})

	t.Run("a conflict on one key refuses its batch, whose other values are then written one at a time", func(t *testing.T) {
		w := newIntentWriter(t, st, true)
		f, devs := manyDevices("b", n, "first")
		flushAll(w, f, devs...)
		foreign := devs[kvBatch+7] // in the second batch
		if _, err := w.kv.Put(ctx, foreign, []byte(`{"v":"foreign"}`)); err != nil {
			t.Fatal(err)
		}
		f, _ = manyDevices("b", n, "second")
		left := flushAll(w, f, devs...)
		if len(left) != 1 || !left[foreign] {
			t.Fatalf("dirty after the flush: %d devices (%v); want only %s, whose key another writer moved", len(left), left[foreign], foreign)
		}
		if got := bucketValue(t, w, foreign); got != `{"v":"foreign"}` {
			t.Errorf("%s holds %s: the writer overwrote a value it had not seen", foreign, got)
		}
		if got := w.written[foreign].val; got != `{"v":"foreign"}` {
			t.Errorf("the writer did not re-read %s after the conflict: it knows %q", foreign, got)
		}
		for _, d := range devs {
			if d == foreign {
				continue
			}
			if got := bucketValue(t, w, d); got != f[d] {
				t.Fatalf("%s holds %s, want the second round's value", d, got)
			}
		}
		w.flush(ctx, f, left)
		if got := bucketValue(t, w, foreign); got != f[foreign] || len(left) != 0 {
			t.Errorf("after the next flush %s holds %s (dirty %v); want the fold's value", foreign, got, left)
		}
	})
}

// TestTheIntentWriterWritesOneValueAtATimeWhenTheBucketRefusesBatches: a
// bucket provisioned by an earlier build does not allow atomic batches;
// the writer finds out from the first refusal and writes every value, one
// at a time.
func TestTheIntentWriterWritesOneValueAtATimeWhenTheBucketRefusesBatches(t *testing.T) {
	_, st := natstest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := st.JetStream().Stream(ctx, "KV_"+events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := st.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	w := newIntentWriter(t, st, true)
	f, devs := manyDevices("c", kvBatch+10, "first")
	if left := flushAll(w, f, devs...); len(left) != 0 {
		t.Fatalf("%d devices left dirty", len(left))
	}
	for _, d := range devs {
		if got := bucketValue(t, w, d); got != f[d] {
			t.Fatalf("%s holds %q, want %s", d, got, f[d])
		}
	}
	if !w.noBatch {
		t.Error("the writer did not note that the bucket refuses atomic batches")
	}
}

func TestKVConflictRecognisesBothServerCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a single-replica stream's wrong last sequence is a conflict", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, true},
		{"a replicated stream's wrong last sequence is a conflict", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, true},
		{"the client's revision mismatch is a conflict", fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch), true},
		{"a create over an existing key is a conflict", jetstream.ErrKeyExists, true},
		{"a timeout is not a conflict", context.DeadlineExceeded, false},
		{"another API error is not a conflict", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := kvstore.Conflict(tc.err); got != tc.want {
				t.Errorf("kvstore.Conflict(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
