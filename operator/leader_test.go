package operator_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/operator"
)

func TestLeaderElectionBounds(t *testing.T) {
	tests := []struct {
		name string
		le   operator.LeaderElection
		want string // "" valid, else a part of the error
	}{
		{"a disabled election is valid whatever its durations", operator.LeaderElection{LeaseDuration: time.Millisecond}, ""},
		{"the defaults are valid", operator.LeaderElection{Enabled: true}, ""},
		{"a lease in fractions of a second is refused (the Lease stores seconds)", operator.LeaderElection{Enabled: true, LeaseDuration: 15500 * time.Millisecond}, "whole seconds"},
		{"a lease under a second is refused", operator.LeaderElection{Enabled: true, LeaseDuration: 500 * time.Millisecond, RenewDeadline: 400 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}, "at least 1s"},
		{"a lease not longer than the renew deadline is refused", operator.LeaderElection{Enabled: true, LeaseDuration: 10 * time.Second}, "renew deadline"},
		{"a renew deadline within 1.2 retry periods is refused", operator.LeaderElection{Enabled: true, RetryPeriod: 9 * time.Second}, "retry period"},
		{"a negative retry period is refused", operator.LeaderElection{Enabled: true, RetryPeriod: -time.Second}, "positive"},
		{"short test durations are valid", operator.LeaderElection{Enabled: true, LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.le.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestTheTakeoverBoundIsTheLeasePlusTwoJitteredRetries(t *testing.T) {
	if got, want := (operator.LeaderElection{}).TakeoverBound(), 15*time.Second+8800*time.Millisecond; got != want {
		t.Errorf("default bound %s, want %s", got, want)
	}
	le := operator.LeaderElection{LeaseDuration: 6 * time.Second, RenewDeadline: 4 * time.Second, RetryPeriod: time.Second}
	if got, want := le.TakeoverBound(), 10400*time.Millisecond; got != want {
		t.Errorf("bound %s, want %s", got, want)
	}
}
