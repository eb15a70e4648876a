package events_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
)

// TestReportStreamsPersistAsyncOnlyOnOneServer: JetStream refuses async
// persist on a replicated stream (err_code 10052), so on a cluster the
// reports and telemetry streams use the default mode (ADR 0002, addendum).
func TestReportStreamsPersistAsyncOnlyOnOneServer(t *testing.T) {
	tests := []struct {
		name     string
		replicas int
		want     jetstream.PersistModeType
	}{
		{"one server keeps reports and telemetry in async persist mode", 1, jetstream.AsyncPersistMode},
		{"a three-server cluster uses the default mode for every stream", 3, jetstream.DefaultPersistMode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range events.StreamConfigs(events.ProvisionOptions{Replicas: tc.replicas}) {
				want := jetstream.DefaultPersistMode
				if c.Name == events.StreamReports || c.Name == events.StreamTelemetry {
					want = tc.want
				}
				if c.PersistMode != want {
					t.Errorf("%s: persist mode %v, want %v", c.Name, c.PersistMode, want)
				}
				if c.Replicas != tc.replicas {
					t.Errorf("%s: %d replicas, want %d", c.Name, c.Replicas, tc.replicas)
				}
			}
		})
	}
}
