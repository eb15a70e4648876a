package agent_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestTheResyncReadsTheIntentOnlyWhenNothingToldItForAnInterval: the
// resync reads the device's intent by direct get only when nothing told
// the agent its stored value for a whole ResyncInterval (ADR 0034): a
// value read, or notified as stored, within the interval is the stored
// value of then, and a change after it comes with a notification or is
// read one interval after it at the latest, as before. An agent whose
// notifications keep coming reads nothing more (each read is the whole
// value: issue #37, the intent reads of an idle device after every
// reconnect and resync); one that heard nothing reads at the resync.
func TestTheResyncReadsTheIntentOnlyWhenNothingToldItForAnInterval(t *testing.T) {
	const resync = 6 * time.Second
	tests := []struct {
		name string
		// notify puts the value again (a stored-value notification)
		// after each pass, for two intervals (a resync every interval
		// would read at least once), instead of staying idle until a
		// resync read.
		notify bool
	}{
		{"an agent told its stored value within every interval reads nothing more", true},
		{"an agent told nothing for an interval reads the value at the resync", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := agent.NewMetrics(nil)
			reg := registry(t, m)
			e := startAgent(t, func(o *agent.Options) { o.Metrics, o.ResyncInterval = m, resync })
			e.put(entry(t, 1, baseScore()))
			e.waitStatus(1, events.WorkloadConverged)
			reads := series(t, reg)[readsOK]
			if !tt.notify {
				testenv.Eventually(t, "a read at the resync", 3*resync, func() bool { return series(t, reg)[readsOK] > reads })
				return
			}
			start := time.Now()
			for time.Since(start) < 2*resync {
				passes := series(t, reg)[passConverged]
				e.put(entry(t, 1, baseScore()))
				testenv.Eventually(t, "the pass of the notified value", 10*time.Second, func() bool {
					return series(t, reg)[passConverged] > passes
				})
			}
			if got := series(t, reg)[readsOK] - reads; got != 0 {
				t.Errorf("%v intent reads in %s of notifications within every %s resync interval; want none", got, time.Since(start).Round(time.Second), resync)
			}
		})
	}
}
