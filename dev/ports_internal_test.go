package dev

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestTheDefaultMetricsPortMovesAsideWhenTaken: a second fleet dev finds
// the default metrics port 9464 taken (here by the test, or by another
// fleet dev); its metrics move to a free port of the same host, and a log
// record says so. A port given with --metrics-addr does not move.
func TestTheDefaultMetricsPortMovesAsideWhenTaken(t *testing.T) {
	if ln, err := net.Listen("tcp", DefaultMetricsAddr); err == nil {
		defer ln.Close() // else another process holds it: as good
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	paths := map[string]prometheus.Gatherer{"/metrics": prometheus.NewRegistry()}
	srv, err := listenMetrics(log, DefaultMetricsAddr, paths)
	if err != nil {
		t.Fatalf("with %s taken: %v, want a free port", DefaultMetricsAddr, err)
	}
	host, port, _ := net.SplitHostPort(srv.Addr())
	if host != "127.0.0.1" || port == "9464" {
		t.Errorf("metrics on %s, want 127.0.0.1 and another port than 9464", srv.Addr())
	}
	if !strings.Contains(logs.String(), "9464 is taken") || !strings.Contains(logs.String(), srv.Addr()) {
		t.Errorf("no log record says the metrics moved to %s:\n%s", srv.Addr(), logs.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Run(ctx); err != nil { // stops at once, closing the listener
		t.Error(err)
	}

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	if _, err := listenMetrics(log, taken.Addr().String(), paths); err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("a taken --metrics-addr: %v, want an error naming the flag", err)
	}
}
