package runtime_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

func TestIsUnavailableTellsTransportErrorsFromRefusals(t *testing.T) {
	dial := &url.Error{Op: "Get", URL: "http://d/v5/libpod/_ping", Err: &net.OpError{Op: "dial", Net: "unix",
		Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a refused dial of the socket is unavailable", fmt.Errorf("podman: list: %w", dial), true},
		{"a missing socket is unavailable", &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.ENOENT)}, true},
		{"a reset connection is unavailable", fmt.Errorf("inspect: %w", syscall.ECONNRESET), true},
		{"an answer cut short is unavailable", fmt.Errorf("pull: %w", io.ErrUnexpectedEOF), true},
		{"the sentinel is unavailable", fmt.Errorf("sim: %w", runtime.ErrUnavailable), true},
		{"a missing image is not", fmt.Errorf("pull: %w", runtime.ErrImageNotFound), false},
		{"an auth failure is not", fmt.Errorf("pull: %w", runtime.ErrAuth), false},
		{"a name in use is not", runtime.ErrNameInUse, false},
		{"a plain error is not", errors.New("exited with code 3"), false},
		{"nil is not", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := runtime.IsUnavailable(tc.err); got != tc.want {
				t.Fatalf("IsUnavailable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
