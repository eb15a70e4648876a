package agent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

func TestTheHealthStateFileIsWrittenAtomicallyAndReadBack(t *testing.T) {
	dir := t.TempDir()
	want := healthState{Deployments: []savedHealth{{Namespace: "lab", Name: "analysis", UID: "u1", Generation: 1, RevisionID: "r1",
		Hash: "h1", Degraded: true, Reason: events.HealthCrashLoop, Since: t0, K: 1, Marks: []healthMark{{At: t0, Degraded: true}},
		Last: &savedMsg{Subject: "fleet.report.d1.health", Header: map[string][]string{"Nats-Msg-Id": {"01J"}}, Data: []byte(`{"a":1}`)}}}}
	if err := saveHealthState(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := loadHealthState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Deployments) != 1 || got.Deployments[0].Reason != events.HealthCrashLoop || !got.Deployments[0].Since.Equal(t0) ||
		string(got.Deployments[0].Last.Data) != `{"a":1}` {
		t.Errorf("read back %+v", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != HealthStateFile {
		t.Errorf("the directory holds %v, want only %s (no temporary file left)", entries, HealthStateFile)
	}
}

func TestAHealthStateFileThatCannotBeUsedIsAnError(t *testing.T) {
	tests := []struct {
		name  string
		dir   func(t *testing.T) string
		isErr error
	}{
		{"no state directory", func(*testing.T) string { return "" }, fs.ErrNotExist},
		{"no file", func(t *testing.T) string { return t.TempDir() }, fs.ErrNotExist},
		{"a file that does not decode", func(t *testing.T) string {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, HealthStateFile), []byte("{"), 0o600); err != nil {
				t.Fatal(err)
			}
			return d
		}, nil},
		{"a file of another version", func(t *testing.T) string {
			d := t.TempDir()
			if err := os.WriteFile(filepath.Join(d, HealthStateFile), []byte(`{"version":9}`), 0o600); err != nil {
				t.Fatal(err)
			}
			return d
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadHealthState(tc.dir(t))
			if err == nil {
				t.Fatal("no error")
			}
			if tc.isErr != nil && !errors.Is(err, tc.isErr) {
				t.Errorf("error %v, want %v", err, tc.isErr)
			}
		})
	}
}

// TestAnAgentRestartKeepsDegradedFromTheFile: the engine of a restarted
// agent, given the file, keeps a Degraded revision Degraded without a new
// report, and recovers it once stable; without the file, a service that
// had restarted is observed for one window and reported once.
func TestAnAgentRestartKeepsDegradedFromTheFile(t *testing.T) {
	first := newEngineRun()
	for i := range 3 {
		first.at(time.Duration(i)*time.Second, func() { first.crash("api", 2) })
	}
	first.until(10 * time.Second)
	if first.got() != "2s Degraded CrashLoop" {
		t.Fatalf("before the restart: %s", first.got())
	}
	st := first.h.state(nil)

	restart := func(st healthState, ok bool) *engineRun {
		h := newHealthEngine(healthRules{}, t0)
		h.restore(st, ok)
		r := &engineRun{h: h, now: t0.Add(10 * time.Second)}
		h.track(testKey, testRev, []string{"api", "worker"}, true, r.now)
		r.h.observe(testKey, testRev.Hash, "api", serviceObs{State: "running", RestartsTotal: 3, RestartedBefore: true}, r.now)
		r.observe("worker", "running", "")
		return r
	}
	t.Run("with the file it stays Degraded with no new report while it crashes", func(t *testing.T) {
		r := restart(st, true)
		r.at(20*time.Second, func() { r.crash("api", 2) })
		r.at(30*time.Second, func() { r.crash("api", 2) })
		r.at(40*time.Second, func() { r.crash("api", 2) })
		r.until(2 * time.Minute)
		if r.got() != "" {
			t.Errorf("reports after the restart: %s", r.got())
		}
		r.until(20 * time.Minute)
		if r.got() != "5m40s Recovered Stable" { // no new Degraded: k = 1, 5 m after the last death
			t.Errorf("reports after the restart: %s, want one Recovered", r.got())
		}
	})
	t.Run("without the file a service that had restarted is reported once after a window", func(t *testing.T) {
		r := restart(healthState{}, false)
		r.at(20*time.Second, func() { r.crash("api", 2) })
		r.at(30*time.Second, func() { r.crash("api", 2) })
		r.at(40*time.Second, func() { r.crash("api", 2) })
		r.until(2 * time.Hour)
		if r.got() != "5m10s Degraded CrashLoop, 10m10s Recovered Stable" {
			t.Errorf("reports: %s", r.got())
		}
	})
	t.Run("without the file a service that had restarted and is stable is reported recovered once", func(t *testing.T) {
		r := restart(healthState{}, false)
		r.until(2 * time.Hour)
		if r.got() != "5m10s Recovered Stable" {
			t.Errorf("reports: %s", r.got())
		}
	})
	t.Run("without the file a service that never restarted reports nothing", func(t *testing.T) {
		h := newHealthEngine(healthRules{}, t0)
		h.restore(healthState{}, false)
		r := &engineRun{h: h, now: t0}
		h.track(testKey, testRev, []string{"api"}, true, t0)
		r.observe("api", "running", "")
		r.until(2 * time.Hour)
		if r.got() != "" {
			t.Errorf("reports: %s", r.got())
		}
	})
}
