package devenv_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/devenv"
)

// start runs fleet dev in the background and returns its NATS URL and a stop
// function that waits for Run to return.
func start(t *testing.T, dir string, out *bytes.Buffer) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- devenv.Run(ctx, devenv.Options{DataDir: dir, NATSPort: -1, Out: out, Ready: func(u string) { ready <- u }})
	}()
	select {
	case u := <-ready:
		return u, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v", err)
			}
		}
	case err := <-done:
		cancel()
		t.Fatalf("fleet dev stopped before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("fleet dev not ready after 60s")
	}
	return "", nil
}

func TestDevResumesTheSameStateAfterARestart(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	url, stop := start(t, dir, &out)
	for _, want := range []string{"export NATS_URL=" + url, "nats stream ls", "Not started by this build yet"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("fleet dev output lacks %q:\n%s", want, out.String())
		}
	}
	ev, err := events.New(events.Keys{Namespace: "lab", Name: "api"},
		events.NewRolloutTransition(events.TypeRolloutStarted, events.RolloutTransition{UID: "u", Generation: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	func() {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		st, _ := events.NewStore(nc, events.StoreOptions{})
		if _, err := st.Append(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}()
	stop()

	url, stop = start(t, dir, &bytes.Buffer{})
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, _ := events.NewStore(nc, events.StoreOptions{})
	rec, err := st.Last(ctx, "fleet.rollout.deployment.lab.api")
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if rec.Event.ID != ev.ID {
		t.Errorf("after restart the last event is %s, want %s", rec.Event.ID, ev.ID)
	}
}

func TestDevRefusesBadOptions(t *testing.T) {
	err := devenv.Run(context.Background(), devenv.Options{NATSPort: 70000})
	if err == nil || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "--nats-port") {
		t.Errorf("got %v, want errors naming --data-dir and --nats-port", err)
	}
}
