package agent_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// minReady (ADR 0019, A.5) through the daemon, on the simulated engine
// and a fake clock.

func withMinReady(e events.IntentEntry, seconds int64) events.IntentEntry {
	e.MinReadySeconds = seconds
	return e
}

// phases are the phases the device reported for generation gen.
func (e *watchEnv) phases(gen int64) []events.WorkloadPhase {
	var out []events.WorkloadPhase
	for _, s := range e.statuses() {
		if s.Generation == gen {
			out = append(out, s.Phase)
		}
	}
	return out
}

// passes is the number of passes the agent ran.
func (e *watchEnv) passes() int {
	s := series(e.t, e.reg)
	n := 0
	for _, r := range []string{"converged", "failed", "error"} {
		n += int(s[`fleet_agent_pass_duration_seconds_count{result="`+r+`"}`])
	}
	return n
}

func TestMinReadyZeroReportsAsToday(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	en := entry(t, 1, baseScore())
	plain, _ := json.Marshal(en)
	zero, _ := json.Marshal(withMinReady(en, 0))
	if !bytes.Equal(plain, zero) {
		t.Fatalf("an entry with minReady 0 encodes as %s, not as today's %s", zero, plain)
	}
	e.put(en)
	e.waitStatus(1, events.WorkloadConverged) // without the clock moving
	for range 3 {
		e.advance(time.Minute)
	}
	if got := e.phases(1); !slices.Equal(got, []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged}) {
		t.Errorf("reports %v, want Applying then Converged, as today", got)
	}
	if got := e.healthText(); got != "" {
		t.Errorf("health reports %s for a healthy Deployment", got)
	}
}

func TestMinReadyConvergesOnlyAfterThePeriod(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	e.put(withMinReady(entry(t, 1, baseScore()), 30))
	e.waitStatus(1, events.WorkloadApplying)
	e.advance(29 * time.Second)
	if got := e.phases(1); !slices.Equal(got, []events.WorkloadPhase{events.WorkloadApplying}) {
		t.Fatalf("after 29 s of a 30 s minReady: %v", got)
	}
	e.advance(time.Second)
	e.waitStatus(1, events.WorkloadConverged)
	if got := e.phases(1); !slices.Equal(got, []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged}) {
		t.Errorf("reports %v", got)
	}
}

func TestACrashWithinMinReadyFails(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	e.put(withMinReady(entry(t, 1, baseScore()), 30))
	e.waitStatus(1, events.WorkloadApplying)
	e.printCrashOutput()
	e.advance(4 * time.Second)
	e.crash("api", 2, false)
	st := e.waitStatus(1, events.WorkloadFailed)
	want := "service api exited with code 2 4s after it started, within the Deployment's minReady of 30s (1 restart); " +
		"its last output: connecting as admin with *** | fatal: DB_HOST is not set"
	if st.Error != want {
		t.Errorf("error\n got %s\nwant %s", st.Error, want)
	}

	t.Run("it stays failed: a resync never settles it again", func(t *testing.T) {
		e.advance(time.Minute)
		before := e.passes()
		e.put(withMinReady(entry(t, 1, baseScore()), 30)) // the same revision again: a pass
		testenv.Eventually(t, "a pass of the same revision", 20*time.Second, func() bool { return e.passes() > before })
		e.advance(time.Minute)
		if got := e.phases(1); !slices.Equal(got, []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadFailed}) {
			t.Errorf("reports %v, want Applying then Failed only", got)
		}
	})
	t.Run("a new revision settles again", func(t *testing.T) {
		s := baseScore()
		s.Data.Services[0].Image = "reg.example/api:v2"
		e.put(withMinReady(entry(t, 2, s), 30))
		e.waitStatus(2, events.WorkloadApplying)
		e.advance(30 * time.Second)
		e.waitStatus(2, events.WorkloadConverged)
	})
}

func TestASettlingPassDoesNotHoldTheNextDeployment(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	slow := withMinReady(entry(t, 1, baseScore()), 600)
	other := entry(t, 1, baseScore())
	other.Name = "other"
	s := baseScore()
	s.Data.InitContainer = nil
	s.Data.Services = s.Data.Services[1:2]
	s.Data.Services[0].Name = "other-worker"
	other.Score = scoreJSON(t, s)
	e.put(slow, other)
	testenv.Eventually(t, "the second Deployment converges", 20*time.Second, func() bool {
		for _, st := range e.statuses() {
			if st.Deployment == "other" && st.Phase == events.WorkloadConverged {
				return true
			}
		}
		return false
	})
	for _, st := range e.statuses() {
		if st.Deployment == "analysis" && st.Phase != events.WorkloadApplying {
			t.Errorf("the settling Deployment reported %s before its minReady", st.Phase)
		}
	}
	e.advance(10 * time.Minute)
	e.waitStatus(1, events.WorkloadConverged)
}
