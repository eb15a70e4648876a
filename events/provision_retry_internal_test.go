package events

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

func TestAPlacementRefusalIsTriedAgainAndOtherErrorsAreNot(t *testing.T) {
	noPeers := &jetstream.APIError{Code: 500, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement, peer offline"}
	other := &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}
	tests := []struct {
		name      string
		errs      []error
		wantCalls int
		wantErr   error
	}{
		{"two refusals for want of peers, then the create succeeds", []error{noPeers, noPeers, nil}, 3, nil},
		{"another API error is returned at once", []error{other, nil}, 1, other},
		{"an error that is no API error is returned at once", []error{context.DeadlineExceeded, nil}, 1, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			got, err := retryPlacement(t.Context(), func() (int, error) {
				err := tt.errs[calls]
				calls++
				return calls, err
			})
			if calls != tt.wantCalls || got != tt.wantCalls || !errors.Is(err, tt.wantErr) {
				t.Errorf("%d calls, result %d, error %v; want %d calls, error %v", calls, got, err, tt.wantCalls, tt.wantErr)
			}
		})
	}
}
