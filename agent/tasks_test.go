package agent_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/updater"
)

// taskEnv is one NATS server with the fleet streams, a real updater on a
// real socket (allowed uid: this process's) whose apt binaries are shell
// stand-ins (the real apt runs in updater's TestSystemUpgradeInADebianRoot),
// and an agent that can be stopped and started again.
type taskEnv struct {
	t       *testing.T
	ctx     context.Context
	st      *events.Store
	kv      jetstream.KeyValue
	nc      *nats.Conn
	aptDir  string
	client  updater.Client
	stopAgt func()
	// now, when set, is the agents' clock.
	now func() time.Time
}

func newTaskEnv(t *testing.T) *taskEnv {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	e := &taskEnv{t: t, ctx: ctx, st: st, kv: kv, nc: natstest.Connect(t, srv, nats.CustomInboxPrefix("_INBOX_d1")), aptDir: t.TempDir()}
	d := e.aptDir
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "version"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(d, "release"), 0o600); err != nil {
		t.Fatal(err)
	}
	write("apt-get", `echo "apt-get $*" >> `+d+`/calls
case "$*" in *full-upgrade*)
  if [ -e `+d+`/block ]; then read x < `+d+`/release; fi
  echo "Setting up demo (2) ..."; echo 2 > `+d+`/version;;
esac
`)
	write("dpkg", "true\n")
	write("dpkg-query", `printf 'demo\t%s\tii \n' "$(cat `+d+`/version)"`+"\n")

	sock := filepath.Join(t.TempDir(), "updater.sock")
	uctx, ucancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- updater.Run(uctx, updater.Options{Socket: sock, SocketGID: -1, AllowedUID: uint32(os.Getuid()), StateDir: t.TempDir(),
			Apt: updater.Apt{AptGet: filepath.Join(d, "apt-get"), Dpkg: filepath.Join(d, "dpkg"), DpkgQuery: filepath.Join(d, "dpkg-query")}})
	}()
	t.Cleanup(func() {
		ucancel()
		if err := <-done; err != nil {
			t.Errorf("updater.Run: %v", err)
		}
	})
	testenv.Eventually(t, "the updater's socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	e.client = updater.Client{Socket: sock}
	return e
}

// startAgent runs an agent (with the updater unless noUpdater) until
// stopAgt or the test's end.
func (e *taskEnv) startAgent(noUpdater bool) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	o := agent.Options{Device: "d1", Conn: e.nc, Reconciler: newWorld(e.t).r, AgentVersion: "test", HeartbeatInterval: time.Hour,
		TaskPoll: 20 * time.Millisecond, Now: e.now}
	if !noUpdater {
		o.Updater = e.client
	}
	go func() { done <- agent.Run(ctx, o) }()
	stopped := false
	e.stopAgt = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("agent.Run: %v", err)
		}
	}
	e.t.Cleanup(e.stopAgt)
}

func (e *taskEnv) put(tasks ...events.TaskEntry) {
	e.t.Helper()
	b, err := json.Marshal(events.DeviceIntent{Device: "d1", Tasks: tasks})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kv.Put(e.ctx, "d1", b); err != nil {
		e.t.Fatal(err)
	}
}

// reports returns every task status the device reported for uid.
func (e *taskEnv) reports(uid string) []events.TaskStatus {
	e.t.Helper()
	var out []events.TaskStatus
	for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.task", events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		ts, err := events.Decode[events.TaskStatus](r.Event)
		if err != nil {
			e.t.Fatal(err)
		}
		if ts.UID == uid {
			out = append(out, ts)
		}
	}
	return out
}

func (e *taskEnv) waitPhase(uid, phase string) events.TaskStatus {
	e.t.Helper()
	var got events.TaskStatus
	if testenv.Poll(e.ctx, 20*time.Second, func() bool {
		rs := e.reports(uid)
		if len(rs) > 0 && rs[len(rs)-1].Phase == phase {
			got = rs[len(rs)-1]
			return true
		}
		return false
	}) != nil {
		e.t.Fatalf("task %s never reported %s; reports: %+v", uid, phase, e.reports(uid))
	}
	return got
}

func (e *taskEnv) upgrades() int {
	b, _ := os.ReadFile(filepath.Join(e.aptDir, "calls"))
	return strings.Count(string(b), "full-upgrade")
}

func phases(rs []events.TaskStatus) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Phase)
	}
	return out
}

func upgrade(uid string) events.TaskEntry {
	return events.TaskEntry{Namespace: "lab", TaskRun: "upgrade-" + uid, UID: uid, Task: events.TaskSystemUpgrade}
}

func TestATaskRunsThroughTheUpdaterOnceAndIsReportedOnChange(t *testing.T) {
	e := newTaskEnv(t)
	e.startAgent(false)
	e.put(upgrade("task-a"))
	got := e.waitPhase("task-a", events.TaskSucceeded)
	if d := cmp.Diff([]events.PackageChange{{Package: "demo", From: "1", To: "2"}}, got.Changes); d != "" {
		t.Errorf("changes (-want +got):\n%s", d)
	}
	if !strings.Contains(got.Output, "Setting up demo (2)") {
		t.Errorf("output %q lacks apt's", got.Output)
	}
	if d := cmp.Diff([]string{events.TaskPending, events.TaskRunning, events.TaskSucceeded}, phases(e.reports("task-a"))); d != "" {
		t.Errorf("phases reported (-want +got):\n%s", d)
	}

	t.Run("after an agent restart the same task is reported from the updater's record, never run again", func(t *testing.T) {
		e.stopAgt()
		before := len(e.reports("task-a"))
		e.startAgent(false)
		testenv.Eventually(t, "the restarted agent's report", 20*time.Second, func() bool {
			rs := e.reports("task-a")
			return len(rs) > before && rs[len(rs)-1].Phase == events.TaskSucceeded
		})
		if n := e.upgrades(); n != 1 {
			t.Errorf("full-upgrade ran %d times, want once", n)
		}
		if d := cmp.Diff([]string{events.TaskSucceeded}, phases(e.reports("task-a")[before:])); d != "" {
			t.Errorf("the restarted agent's reports (-want +got):\n%s", d)
		}
	})
}

func TestInvalidTaskEntriesAreReportedFailedAndTheOthersRun(t *testing.T) {
	e := newTaskEnv(t)
	e.startAgent(false)
	bad := []struct {
		name  string
		entry events.TaskEntry
		want  string
	}{
		{"an unknown task is skipped", events.TaskEntry{Namespace: "lab", TaskRun: "x", UID: "bad-1", Task: "reboot"}, `unknown task "reboot"`},
		{"an agent-upgrade with a file URL is skipped", events.TaskEntry{Namespace: "lab", TaskRun: "x", UID: "bad-2", Task: events.TaskAgentUpgrade,
			Agent: &events.AgentArtifact{URL: "file:///etc/shadow", SHA256: strings.Repeat("a", 64), Version: "2"}}, "agent.url"},
		{"a task with an invalid namespace is skipped", events.TaskEntry{Namespace: "Lab/..", TaskRun: "x", UID: "bad-3", Task: events.TaskSystemUpgrade}, "namespace"},
	}
	var entries []events.TaskEntry
	for _, b := range bad {
		entries = append(entries, b.entry)
	}
	e.put(append(entries, upgrade("good-1"))...)
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			got := e.waitPhase(b.entry.UID, events.TaskFailed)
			if !strings.Contains(got.Error, b.want) {
				t.Errorf("error %q does not say %q", got.Error, b.want)
			}
		})
	}
	e.waitPhase("good-1", events.TaskSucceeded)
}

func TestWithoutAnUpdaterATaskFailsSayingSo(t *testing.T) {
	e := newTaskEnv(t)
	e.startAgent(true)
	e.put(upgrade("task-n"))
	if got := e.waitPhase("task-n", events.TaskFailed); got.Error != agent.ErrNoUpdater.Error() {
		t.Errorf("error %q, want %q", got.Error, agent.ErrNoUpdater)
	}
	if n := e.upgrades(); n != 0 {
		t.Errorf("full-upgrade ran %d times", n)
	}
}

func TestATaskRemovedFromTheIntentWhileRunningIsNotInterrupted(t *testing.T) {
	e := newTaskEnv(t)
	if err := os.WriteFile(filepath.Join(e.aptDir, "block"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.startAgent(false)
	e.put(upgrade("task-r"))
	e.waitPhase("task-r", events.TaskRunning)
	testenv.Eventually(t, "full-upgrade to start", 10*time.Second, func() bool { return e.upgrades() == 1 })
	e.put() // the TaskRun is deleted
	if err := os.WriteFile(filepath.Join(e.aptDir, "release"), []byte("go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitPhase("task-r", events.TaskSucceeded)
}

// TestATaskWithAMaintenanceWindowStartsOnlyInsideIt: outside its daily
// window (device local time) a task waits, reported Pending with when the
// window opens, and nothing runs; inside it the task runs; a device that
// missed a window (offline, or the task came after it closed) runs it in
// the next one.
func TestATaskWithAMaintenanceWindowStartsOnlyInsideIt(t *testing.T) {
	loc := time.FixedZone("device", -5*3600)
	var clock atomic.Int64 // unix seconds; reads counted
	var reads atomic.Int64
	clock.Store(time.Date(2026, 12, 5, 1, 0, 0, 0, loc).Unix())
	e := newTaskEnv(t)
	e.now = func() time.Time { reads.Add(1); return time.Unix(clock.Load(), 0).In(loc) }
	e.startAgent(false)
	task := upgrade("task-w")
	task.Window = &events.MaintenanceWindow{Start: "02:00", Duration: "1h"}
	e.put(task)
	got := e.waitPhase("task-w", events.TaskPending)
	testenv.Eventually(t, "the waiting report", 20*time.Second, func() bool {
		rs := e.reports("task-w")
		got = rs[len(rs)-1]
		return strings.Contains(got.Error, "waiting for the maintenance window")
	})
	if !strings.Contains(got.Error, "02:00 for 1h") || !strings.Contains(got.Error, "2026-12-05 02:00") {
		t.Errorf("pending report %q does not say which window and when it opens", got.Error)
	}
	from := reads.Load()
	testenv.Eventually(t, "the runner to look at the clock again", 20*time.Second, func() bool { return reads.Load() >= from+5 })
	if n := e.upgrades(); n != 0 {
		t.Fatalf("full-upgrade ran %d times before the window opened", n)
	}

	t.Run("after the window closed it waits for tomorrow's", func(t *testing.T) {
		clock.Store(time.Date(2026, 12, 5, 3, 0, 0, 0, loc).Unix())
		testenv.Eventually(t, "the report naming tomorrow's window", 20*time.Second, func() bool {
			rs := e.reports("task-w")
			return strings.Contains(rs[len(rs)-1].Error, "2026-12-06 02:00")
		})
		if n := e.upgrades(); n != 0 {
			t.Fatalf("full-upgrade ran %d times outside the window", n)
		}
	})
	t.Run("inside the next window it runs", func(t *testing.T) {
		clock.Store(time.Date(2026, 12, 6, 2, 30, 0, 0, loc).Unix())
		e.waitPhase("task-w", events.TaskSucceeded)
		if n := e.upgrades(); n != 1 {
			t.Errorf("full-upgrade ran %d times, want once", n)
		}
	})
}
