package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// natsCLI finds the nats CLI built by `task setup:natscli`.
func natsCLI(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FLEET_NATS_CLI")
	if path == "" {
		path = filepath.Join("..", ".cache", "tools", "natscli-v0.5.0", "nats")
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		_, err = exec.LookPath(abs)
	}
	if err != nil {
		testenv.Missing(t, "the nats CLI v0.5.0", "go tool -modfile=tools/go.mod task setup:natscli", err)
	}
	return abs
}

// streamContents returns every message of every stream: name → seq → data
// (subject and payload).
func streamContents(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string]map[uint64]string {
	t.Helper()
	all := map[string]map[uint64]string{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		msgs := map[uint64]string{}
		for seq := st.FirstSeq; seq <= st.LastSeq && st.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if err != nil {
				continue // a deleted sequence
			}
			msgs[seq] = m.Subject + " " + string(m.Data)
		}
		all[name] = msgs
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return all
}

func TestABackupOfTheStreamsRestoresIntoAFreshServer(t *testing.T) {
	cli := natsCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src, st := natstest.Provisioned(t)
	nc := natstest.Connect(t, src)
	js := st.JetStream()

	// Five messages on a subject of every stream (reports and telemetry
	// never acknowledge: core publishes, then wait until stored).
	names := js.StreamNames(ctx)
	var streams []string
	for name := range names.Name() {
		streams = append(streams, name)
	}
	if len(streams) < 8 {
		t.Fatalf("the provisioned server has %d streams: %v", len(streams), streams)
	}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			// A subject of its own per message: buckets keep one value a key.
			token := "backup" + strconv.Itoa(i)
			subj := strings.NewReplacer("*", token, ">", token).Replace(s.CachedInfo().Config.Subjects[0])
			if err := nc.Publish(subj, []byte(name+" message "+strconv.Itoa(i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var short string
	if err := testenv.Poll(ctx, 30*time.Second, func() bool {
		for _, name := range streams {
			s, err := js.Stream(ctx, name)
			if err != nil || s.CachedInfo().State.Msgs < 5 {
				short = name
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("stream %s never held five messages", short)
	}
	want := streamContents(t, ctx, js)

	// The documented commands: back up the account, restore it into a
	// server with an empty store.
	dir := filepath.Join(t.TempDir(), "fleet-backup")
	run := func(url string, args ...string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, cli, append([]string{"--server", url}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	run(src.ClientURL(), "backup", "account", dir, "--force")
	// The documented step after the backup: FLEET_LIVENESS is soft state
	// in memory (ADR 0024), with no snapshot to restore.
	if err := os.RemoveAll(filepath.Join(dir, events.StreamLiveness)); err != nil {
		t.Fatal(err)
	}
	delete(want, events.StreamLiveness)
	dst := natstest.Start(t, "")
	run(dst.ClientURL(), "backup", "restore", "account", dir)

	djs, err := jetstream.New(natstest.Connect(t, dst, nats.Name("restored")))
	if err != nil {
		t.Fatal(err)
	}
	got := streamContents(t, ctx, djs)
	for name, msgs := range want {
		if len(got[name]) != len(msgs) {
			t.Errorf("stream %s: %d messages restored, want %d", name, len(got[name]), len(msgs))
			continue
		}
		for seq, m := range msgs {
			if got[name][seq] != m {
				t.Errorf("stream %s seq %d: restored %q, want %q", name, seq, got[name][seq], m)
			}
		}
	}
}
