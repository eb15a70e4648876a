package updater

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRefusedPeersAreLoggedAtMostOncePerInterval: a refused peer
// connecting in a loop gets one log line per refusalLogEvery, which counts
// the refusals it stands for (the times are given, no clock is read); the
// refusals not logged yet when the server stops are logged then.
func TestRefusedPeersAreLoggedAtMostOncePerInterval(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		at   []time.Duration
		stop bool // the server stops after the last refusal
		want []int
	}{
		{"the first refusal is logged at once", []time.Duration{0}, false, []int{1}},
		{"refusals within the interval are counted in the next line",
			[]time.Duration{0, time.Second, 2 * time.Second, refusalLogEvery + time.Second}, false, []int{1, 3}},
		{"refusals an interval apart are each logged", []time.Duration{0, refusalLogEvery, 2 * refusalLogEvery}, false, []int{1, 1, 1}},
		{"refusals not logged yet are logged when the server stops", []time.Duration{0, time.Second, 2 * time.Second}, true, []int{1, 2}},
		{"a stop with no refusal pending logs nothing more", []time.Duration{0}, true, []int{1}},
		{"a stop with no refusal at all logs nothing", nil, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&buf, nil))
			var r refusalLog
			for _, d := range tc.at {
				r.note(log, errors.New("peer refused: uid 65534 is not the agent's (0)"), t0.Add(d))
			}
			if tc.stop {
				r.flush(log)
			}
			var got []int
			for line := range strings.Lines(buf.String()) {
				var rec struct {
					Msg      string `json:"msg"`
					Refusals int    `json:"refusals"`
				}
				if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Msg != "connection refused" {
					t.Fatalf("log line %q (%v)", line, err)
				}
				got = append(got, rec.Refusals)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("refusals per log line (-want +got):\n%s", d)
			}
		})
	}
}
