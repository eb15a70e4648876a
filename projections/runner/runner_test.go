package runner_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections/runner"
)

// got is what a run handed over: each source's messages in order ("r3":
// record 3, "x2": skip of 2, "caught", "err"), which source's mark was
// Live and how many records each source had handed over by then, and
// where in the whole order each source first spoke and was caught up.
type got struct {
	per      map[int][]string
	live     int
	atLive   map[int]int
	n        int
	firstAt  map[int]int
	caughtAt map[int]int
}

func (g *got) add(m runner.Msg) {
	g.n++
	if _, ok := g.firstAt[m.Source]; !ok {
		g.firstAt[m.Source] = g.n
	}
	if m.Caught {
		g.caughtAt[m.Source] = g.n
	}
	var s string
	switch {
	case m.Err != nil:
		s = "err"
	case m.Caught:
		s = "caught"
		if m.Live {
			g.live++
			g.atLive = map[int]int{}
			for src, l := range g.per {
				g.atLive[src] = len(l)
			}
		}
	case m.Skip != nil:
		s = fmt.Sprintf("x%d", m.Seq())
	default:
		s = fmt.Sprintf("r%d", m.Seq())
	}
	g.per[m.Source] = append(g.per[m.Source], s)
}

func (g *got) count() int {
	n := 0
	for _, l := range g.per {
		n += len(l)
	}
	return n
}

func TestRunner(t *testing.T) {
	tests := []struct {
		name    string
		streams map[string][]string // stored before the run: "r" a record, "x" undecodable
		cuts    map[string]map[string][]int
		sources []runner.Source
		entry   string // "run", "toEnd" or "once"
		// later is stored once the run handed over want's first
		// len(want)-len(later) messages... once every source caught up.
		later map[string][]string
		want  map[int][]string
		// wantLiveAfter: at the Live mark, each source had handed over at
		// least this many messages (its whole history).
		wantLiveAfter map[int]int
		wantFailed    uint64
		// returns: Run returns on its own (every source stops).
		returns bool
		// wantBehind: source k's first message comes after source v's
		// catch-up mark.
		wantBehind map[int]int
	}{
		{
			name:    "a source's history is handed over in order, then its catch-up mark, and it follows what is stored later",
			streams: map[string][]string{"a": {"r", "r", "r"}},
			sources: []runner.Source{{Filters: []string{"a"}}},
			entry:   "run",
			later:   map[string][]string{"a": {"r", "r"}},
			want:    map[int][]string{0: {"r1", "r2", "r3", "caught", "r4", "r5"}},
		},
		{
			name:    "an undecodable record is handed over as a skip and the read goes on past it, catching up and following",
			streams: map[string][]string{"a": {"r", "x", "r"}},
			sources: []runner.Source{{Filters: []string{"a"}}},
			entry:   "run",
			later:   map[string][]string{"a": {"x", "r"}},
			want:    map[int][]string{0: {"r1", "x2", "r3", "caught", "x4", "r5"}},
		},
		{
			name:       "a catch-up read that fails is read again from after the last record, and no record is handed over twice",
			streams:    map[string][]string{"a": {"r", "r", "x", "r"}},
			cuts:       map[string]map[string][]int{"a": {"replay": {1, 2}}},
			sources:    []runner.Source{{Filters: []string{"a"}}},
			entry:      "run",
			later:      map[string][]string{"a": {"r"}},
			want:       map[int][]string{0: {"r1", "r2", "x3", "r4", "caught", "r5"}},
			wantFailed: 2,
		},
		{
			name:       "a follow that fails is read again from after the last record, and no record is handed over twice",
			streams:    map[string][]string{"a": {"r"}},
			cuts:       map[string]map[string][]int{"a": {"follow": {1, 0}}},
			sources:    []runner.Source{{Filters: []string{"a"}}},
			entry:      "run",
			later:      map[string][]string{"a": {"r", "x", "r"}},
			want:       map[int][]string{0: {"r1", "caught", "r2", "x3", "r4"}},
			wantFailed: 2,
		},
		{
			name:       "a follow that ends while the run goes on is read again from after the last record",
			streams:    map[string][]string{"a": {"r"}},
			cuts:       map[string]map[string][]int{"a": {"follow": {endsCleanly + 1}}},
			sources:    []runner.Source{{Filters: []string{"a"}}},
			entry:      "run",
			later:      map[string][]string{"a": {"r", "r"}},
			want:       map[int][]string{0: {"r1", "caught", "r2", "r3"}},
			wantFailed: 1,
		},
		{
			name:    "a source read until a time stops before the first record stored after it, undecodable or not, and is caught up there",
			streams: map[string][]string{"a": {"r", "x", "x", "r"}, "b": {"r", "r", "r"}},
			sources: []runner.Source{{Filters: []string{"a"}, Until: storedAt(2)}, {Filters: []string{"b"}, Until: storedAt(2), AfterPrevious: true}},
			entry:   "once",
			want:    map[int][]string{0: {"r1", "x2", "caught"}, 1: {"r1", "r2", "caught"}},
		},
		{
			name:    "a source read until a time does not follow",
			streams: map[string][]string{"a": {"r", "r"}},
			sources: []runner.Source{{Filters: []string{"a"}, Until: storedAt(1)}},
			entry:   "run",
			later:   map[string][]string{"a": {"r"}},
			want:    map[int][]string{0: {"r1", "caught"}},
			returns: true,
		},
		{
			name:    "a read resumes after a checkpoint's position",
			streams: map[string][]string{"a": {"r", "r", "r", "r"}},
			sources: []runner.Source{{Filters: []string{"a"}, After: 2}},
			entry:   "run",
			later:   map[string][]string{"a": {"r"}},
			want:    map[int][]string{0: {"r3", "r4", "caught", "r5"}},
		},
		{
			name:          "every source catches up on its own and the last catch-up mark is live, after every source's history",
			streams:       map[string][]string{"a": {"r", "r"}, "b": {"r", "x", "r"}, "c": {}},
			sources:       []runner.Source{{Filters: []string{"a"}}, {Filters: []string{"b"}}, {Filters: []string{"c"}}},
			entry:         "run",
			later:         map[string][]string{"c": {"r"}},
			want:          map[int][]string{0: {"r1", "r2", "caught"}, 1: {"r1", "x2", "r3", "caught"}, 2: {"caught", "r1"}},
			wantLiveAfter: map[int]int{0: 2, 1: 3},
		},
		{
			name:       "a source held behind the one before it reads only once that one caught up",
			streams:    map[string][]string{"a": {"r", "r"}, "b": {"r"}},
			sources:    []runner.Source{{Filters: []string{"a"}}, {Filters: []string{"b"}, AfterPrevious: true}},
			entry:      "run",
			want:       map[int][]string{0: {"r1", "r2", "caught"}, 1: {"r1", "caught"}},
			wantBehind: map[int]int{1: 0},
		},
		{
			name:    "a source that only follows hands over nothing stored before its start, and is caught up at once",
			streams: map[string][]string{"a": {"r", "r"}},
			sources: []runner.Source{{Filters: []string{"a"}, FollowOnly: true, From: events.FromTime(time.Now())}},
			entry:   "run",
			later:   map[string][]string{"a": {"x", "r"}},
			want:    map[int][]string{0: {"caught", "x3", "r4"}},
		},
		{
			name:       "run to end reads again after a failed read and returns once caught up",
			streams:    map[string][]string{"a": {"r", "x", "r"}, "b": {"r"}},
			cuts:       map[string]map[string][]int{"a": {"replay": {2}}},
			sources:    []runner.Source{{Filters: []string{"a"}}, {Filters: []string{"b"}}},
			entry:      "toEnd",
			want:       map[int][]string{0: {"r1", "x2", "r3", "caught"}, 1: {"r1", "caught"}},
			wantFailed: 1,
		},
		{
			name:       "run once hands a failed read over and gives no catch-up mark for that source",
			streams:    map[string][]string{"a": {"r", "r", "r"}, "b": {"r"}},
			cuts:       map[string]map[string][]int{"a": {"replay": {2}}},
			sources:    []runner.Source{{Filters: []string{"a"}}, {Filters: []string{"b"}}},
			entry:      "once",
			want:       map[int][]string{0: {"r1", "r2", "err"}, 1: {"r1", "caught"}},
			wantFailed: 1,
		},
		{
			name:       "run once does not read a source held behind one whose read failed, and returns",
			streams:    map[string][]string{"a": {"r", "r"}, "b": {"r"}},
			cuts:       map[string]map[string][]int{"a": {"replay": {1}}},
			sources:    []runner.Source{{Filters: []string{"a"}}, {Filters: []string{"b"}, AfterPrevious: true}},
			entry:      "once",
			want:       map[int][]string{0: {"r1", "err"}},
			wantFailed: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			reader := fakeReader{}
			for name, kinds := range tc.streams {
				reader[name] = newFakeStream(name, kinds...)
				for k, c := range tc.cuts[name] {
					reader[name].cuts[k] = c
				}
			}
			r := &runner.Runner{Name: "test runner", Reader: reader, Sources: tc.sources, RetryMin: time.Millisecond, RetryMax: 4 * time.Millisecond}
			out := make(chan runner.Msg)
			rctx, rcancel := context.WithCancel(ctx)
			defer rcancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				switch tc.entry {
				case "run":
					r.Run(rctx, out)
				case "toEnd":
					r.RunToEnd(rctx, out)
				case "once":
					r.RunOnce(rctx, out)
				}
			}()
			want := 0
			for _, l := range tc.want {
				want += len(l)
			}
			g := &got{per: map[int][]string{}, firstAt: map[int]int{}, caughtAt: map[int]int{}}
			storedLater := false
			for g.count() < want {
				select {
				case m := <-out:
					g.add(m)
				case <-done:
					t.Fatalf("the run returned after %v, want %v", g.per, tc.want)
				case <-ctx.Done():
					t.Fatalf("%v with %v handed over, want %v", ctx.Err(), g.per, tc.want)
				}
				if g.live == 1 && !storedLater {
					storedLater = true
					for name, kinds := range tc.later {
						for _, k := range kinds {
							reader[name].add(name, k)
						}
					}
				}
			}
			if tc.entry == "run" && !tc.returns {
				rcancel()
			}
			select {
			case <-done:
			case m := <-out:
				g.add(m)
				t.Fatalf("handed over more than wanted: %v, want %v", g.per, tc.want)
			case <-ctx.Done():
				t.Fatalf("%v: the run did not return", ctx.Err())
			}
			for src, w := range tc.want {
				if !slices.Equal(g.per[src], w) {
					t.Errorf("source %d handed over %v, want %v", src, g.per[src], w)
				}
			}
			if tc.entry != "once" && g.live != 1 {
				t.Errorf("%d live marks, want 1", g.live)
			}
			for src, n := range tc.wantLiveAfter {
				if g.atLive[src] < n {
					t.Errorf("source %d had handed over %d messages at the live mark, want its whole history (%d)", src, g.atLive[src], n)
				}
			}
			var failed uint64
			for _, s := range reader {
				failed += uint64(s.failed)
			}
			if failed != tc.wantFailed || r.ReadsFailed() != tc.wantFailed {
				t.Errorf("%d reads failed (the runner counted %d), want %d: the test must fail them", failed, r.ReadsFailed(), tc.wantFailed)
			}
			for k, v := range tc.wantBehind {
				if g.firstAt[k] <= g.caughtAt[v] {
					t.Errorf("source %d spoke at message %d, before source %d's catch-up mark (message %d)", k, g.firstAt[k], v, g.caughtAt[v])
				}
			}
		})
	}
}
