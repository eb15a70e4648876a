package scalebench

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be its own child process, as fleet-scale
// is: "<test binary> child <mode> ...".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		if err := RunChild(context.Background(), os.Args[2:], os.Stdin, os.Stdout, log); err != nil {
			log.Error("child failed", "error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestTwentyDevicesConvergeThroughTheCalloutAndTheConsumerCountDoesNotGrow(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Sizes: []int{10, 20}, PerProcess: 12, ConnectRate: 100, Timeout: time.Minute,
		Exe: exe, DataDir: t.TempDir(), Out: &out,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 {
		t.Fatalf("%d results, want 2", len(res))
	}
	for _, r := range res {
		if r.Children != (r.N+11)/12 {
			t.Errorf("N=%d ran in %d child processes, want %d", r.N, r.Children, (r.N+11)/12)
		}
		if r.ConsumersGrew() {
			t.Errorf("N=%d: consumers %v grew with the devices", r.N, r.Consumers)
		}
		if r.Converged <= 0 || r.Succeeded <= 0 || r.FloorAsync <= 0 || r.FloorSync <= 0 || r.Ramp <= 0 {
			t.Errorf("N=%d: a figure is missing: %+v", r.N, r)
		}
	}
	if !strings.Contains(out.String(), "N=20 devices (2 agent process(es))") {
		t.Errorf("the printed figures lack the N=20 line")
	}
}
