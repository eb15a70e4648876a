package agent_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
)

func TestFetchConcurrencyOutsideItsRangeIsRefusedNamingTheRange(t *testing.T) {
	w := newWorld(t)
	tests := []struct {
		name string
		n    int
		want string // "" for valid
	}{
		{"0 takes the default", 0, ""},
		{"1 is valid", 1, ""},
		{"the bound is valid", agent.MaxFetchConcurrency, ""},
		{"a negative count is refused", -1, "FetchConcurrency -1: give 1 to 16, or 0 for 2"},
		{"more than the bound is refused", agent.MaxFetchConcurrency + 1, "FetchConcurrency 17: give 1 to 16, or 0 for 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := agent.Options{Device: "d1", Conn: &nats.Conn{}, Reconciler: w.r, FetchConcurrency: tc.n}.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
