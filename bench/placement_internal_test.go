package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestACreateRefusedForWantOfPeersIsTriedAgainUntilPlaced(t *testing.T) {
	noPeersErr := fmt.Errorf("create: %w", &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement, peer offline"})
	other := &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad request"}
	tests := []struct {
		name      string
		errs      []error // what each call returns, in order; nil: placed
		wantCalls int
		wantErr   error
	}{
		{"a create placed at once is called once", []error{nil}, 1, nil},
		{"a create refused twice for want of peers is placed at the third call", []error{noPeersErr, noPeersErr, nil}, 3, nil},
		{"another error is returned at once", []error{other, nil}, 1, other},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			calls := 0
			_, err := createPlaced(ctx, func(context.Context) (int, error) {
				err := tt.errs[calls]
				calls++
				return calls, err
			})
			if !errors.Is(err, tt.wantErr) || calls != tt.wantCalls {
				t.Fatalf("err %v after %d calls, want %v after %d", err, calls, tt.wantErr, tt.wantCalls)
			}
		})
	}
	t.Run("a create refused for want of peers until the deadline returns that refusal", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := createPlaced(ctx, func(context.Context) (int, error) { return 0, noPeersErr })
		if !noPeers(err) {
			t.Fatalf("err %v, want the no-peers refusal", err)
		}
	})
}
