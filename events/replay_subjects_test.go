package events_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestReplaySubjectsOfSeveralFilters: a replay of several filters of one
// stream hands every record of each once, in stream order, undecodable
// ones in their place, up to where the stream was when it began; each
// filter is read by a consumer of that filter alone (the server's read of
// a consumer of several filters walks every block's subject index for
// each record: twenty times slower over many subjects).
func TestReplaySubjectsOfSeveralFilters(t *testing.T) {
	ctx := testContext(t)
	srv, st := natstest.Provisioned(t)
	nc := natstest.Connect(t, srv)
	var written []string // "kind device" in stream order
	for i := range 30 {
		dev := fmt.Sprintf("d%d", i%4)
		var ev events.Event
		kind := [...]string{"workload", "task", "command"}[i%3]
		switch kind {
		case "workload":
			ev = workload(t, dev, i)
		case "task":
			ev = taskStatus(t, dev)
		default:
			ev = commandResult(t, dev)
		}
		natstest.Report(t, ctx, st, ev)
		written = append(written, kind+" "+dev)
		if i == 10 {
			// A device's record that is no envelope, on its workload subject.
			natstest.PublishStored(t, nc, &nats.Msg{Subject: "fleet.report.d3.workload", Data: []byte(`{"not":"an event"}`)})
			written = append(written, "undecodable d3")
		}
	}
	want := func(keep func(kind, dev string) bool) []string {
		var out []string
		for seq, w := range written {
			var kind, dev string
			fmt.Sscan(w, &kind, &dev)
			if keep(kind, dev) {
				out = append(out, fmt.Sprintf("%d %s", seq+1, w))
			}
		}
		return out
	}
	read := func(t *testing.T, filters []string, from events.Start, during func()) []string {
		t.Helper()
		var got []string
		for rec, err := range st.ReplaySubjects(ctx, filters, from) {
			var re *events.RecordError
			if err != nil && !errors.As(err, &re) {
				t.Fatal(err)
			}
			kind := rec.Subject[len("fleet.report.dX."):]
			if re != nil {
				kind = "undecodable"
			}
			if during != nil {
				during()
				during = nil
			}
			got = append(got, fmt.Sprintf("%d %s %s", rec.Sequence, kind, rec.Subject[len("fleet.report."):len("fleet.report.dX")]))
		}
		return got
	}
	tests := []struct {
		name    string
		filters []string
		from    events.Start
		keep    func(kind, dev string) bool
	}{
		{"two wildcard filters replay every record of both in stream order", []string{"fleet.report.*.workload", "fleet.report.*.task"}, events.FromStart(),
			func(kind, _ string) bool { return kind != "command" }},
		{"three filters of one device each replay that device's records in stream order", []string{"fleet.report.d3.workload", "fleet.report.d3.task", "fleet.report.d3.command"}, events.FromStart(),
			func(_, dev string) bool { return dev == "d3" }},
		{"several filters from a sequence start there", []string{"fleet.report.*.task", "fleet.report.*.command"}, events.FromSequence(20),
			func(kind, _ string) bool { return kind == "task" || kind == "command" }},
		{"filters that overlap hand each record once", []string{"fleet.report.*.workload", "fleet.report.d1.workload"}, events.FromStart(),
			func(kind, dev string) bool { return kind == "workload" || kind == "undecodable" }},
		{"filters that match nothing end at once", []string{"fleet.report.nobody.workload", "fleet.report.nobody.task"}, events.FromStart(),
			func(string, string) bool { return false }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := want(tc.keep)
			if tc.from != events.FromStart() {
				w = w[:0:0]
				for _, s := range want(tc.keep) {
					var seq int
					fmt.Sscan(s, &seq)
					if seq >= 20 {
						w = append(w, s)
					}
				}
			}
			if diff := cmp.Diff(w, read(t, tc.filters, tc.from, nil)); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("each filter is read by a consumer of that filter alone", func(t *testing.T) {
		s, err := st.JetStream().Stream(ctx, events.StreamReports)
		if err != nil {
			t.Fatal(err)
		}
		var filters [][]string
		read(t, []string{"fleet.report.*.workload", "fleet.report.*.task"}, events.FromStart(), func() {
			for name := range s.ConsumerNames(ctx).Name() {
				c, err := s.Consumer(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				cfg := c.CachedInfo().Config
				filters = append(filters, append(cfg.FilterSubjects, cfg.FilterSubject))
			}
		})
		for _, f := range filters {
			if n := len(f) - 1 + min(len(f[len(f)-1]), 1); n > 1 {
				t.Errorf("a consumer of %d filters (%q) reads the history", n, f)
			}
		}
		if len(filters) == 0 {
			t.Error("no consumer was listed during the replay")
		}
	})
	t.Run("a record stored after the replay began is not read", func(t *testing.T) {
		late := workload(t, "d0", 99)
		got := read(t, []string{"fleet.report.*.workload", "fleet.report.*.task"}, events.FromStart(), func() {
			natstest.Report(t, ctx, st, late)
		})
		if diff := cmp.Diff(want(func(kind, _ string) bool { return kind != "command" }), got); diff != "" {
			t.Errorf("records (-want +got):\n%s", diff)
		}
	})
}
