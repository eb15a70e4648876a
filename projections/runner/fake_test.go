package runner_test

import (
	"context"
	"errors"
	"iter"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// errServerGone is a read that fails: its server died under the consumer.
var errServerGone = errors.New("nats: server is disconnected")

// fakeStream is one stream in memory, read as *events.Store reads it: a
// replay ends at the end stored when it began; a follow waits for more
// until ctx ends, then ends without an error. cuts fail reads: the n-th
// replay (follow) fails after cuts["replay"][n-1] records (-1: it does
// not fail).
type fakeStream struct {
	mu     sync.Mutex
	items  []fakeItem
	grew   chan struct{}
	cuts   map[string][]int
	opened map[string]int
	failed int
}

// epoch is when the fake streams' first record was stored.
var epoch = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)

// storedAt is when the record of sequence seq was stored: a second apart.
func storedAt(seq uint64) time.Time { return epoch.Add(time.Duration(seq) * time.Second) }

// endsCleanly plus n is a cut that ends the read after n records without
// an error (a follow whose consumer went away).
const endsCleanly = 1000

// fakeItem is one stored message: a record, or one that does not decode.
type fakeItem struct {
	rec  events.Record
	skip bool
}

func newFakeStream(name string, kinds ...string) *fakeStream {
	s := &fakeStream{grew: make(chan struct{}), cuts: map[string][]int{}, opened: map[string]int{}}
	for _, k := range kinds {
		s.add(name, k)
	}
	return s
}

// add stores one message: "r" a record, "x" one that does not decode.
func (s *fakeStream) add(name, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := uint64(len(s.items) + 1)
	s.items = append(s.items, fakeItem{rec: events.Record{Stream: name, Subject: "fleet.report.d1.workload", Sequence: seq,
		Stored: storedAt(seq)}, skip: kind == "x"})
	close(s.grew)
	s.grew = make(chan struct{})
}

// from decodes a start the runner asks for: the first sequence it names;
// a start of time is the stream's end (nothing stored after it yet).
func (s *fakeStream) from(start events.Start, end int) int {
	if start == events.FromStart() {
		return 0
	}
	for i := 1; i <= end+1; i++ {
		if start == events.FromSequence(uint64(i)) {
			return i - 1
		}
	}
	return end
}

func (s *fakeStream) read(ctx context.Context, kind string, from events.Start, follow bool) iter.Seq2[events.Record, error] {
	return func(yield func(events.Record, error) bool) {
		s.mu.Lock()
		s.opened[kind]++
		cut := -1
		if n := s.opened[kind]; n <= len(s.cuts[kind]) {
			cut = s.cuts[kind][n-1]
		}
		end := len(s.items)
		i := s.from(from, end)
		s.mu.Unlock()
		for n := 0; ; n++ {
			s.mu.Lock()
			if n == cut {
				s.failed++
				s.mu.Unlock()
				yield(events.Record{}, errServerGone)
				return
			}
			if cut >= endsCleanly && n == cut-endsCleanly {
				s.failed++
				s.mu.Unlock()
				return
			}
			if !follow && i >= end {
				s.mu.Unlock()
				return
			}
			grew := s.grew
			if i >= len(s.items) {
				s.mu.Unlock()
				select {
				case <-grew:
					n--
					continue
				case <-ctx.Done():
					return
				}
			}
			it := s.items[i]
			s.mu.Unlock()
			i++
			var err error
			if it.skip {
				err = events.InvalidData(it.rec, errors.New("no such field"))
			}
			if !yield(it.rec, err) {
				return
			}
		}
	}
}

// fakeReader is the streams by their first filter.
type fakeReader map[string]*fakeStream

func (f fakeReader) ReplaySubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error] {
	return f[filters[0]].read(ctx, "replay", from, false)
}

func (f fakeReader) FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error] {
	return f[filters[0]].read(ctx, "follow", from, true)
}
