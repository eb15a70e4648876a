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
	"time"

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

func TestExitUnrecordedTellsARebootsExitFromARealOne(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		c    runtime.Container
		want bool
	}{
		{"an exit after the start is recorded",
			runtime.Container{State: runtime.StateExited, StartedAt: start, FinishedAt: start.Add(time.Second)}, false},
		{"an exit in the same second as the start is recorded",
			runtime.Container{State: runtime.StateExited, StartedAt: start, FinishedAt: start}, false},
		{"an exit the engine dated a few milliseconds before the start it recorded after the process began is recorded",
			runtime.Container{State: runtime.StateExited, StartedAt: start.Add(4 * time.Millisecond), FinishedAt: start}, false},
		{"an exit listed in whole seconds one second before the start is recorded",
			runtime.Container{State: runtime.StateExited, StartedAt: start, FinishedAt: start.Add(-time.Second)}, false},
		{"an exit dated a loaded host's seconds before the start is recorded",
			runtime.Container{State: runtime.StateExited, StartedAt: start, FinishedAt: start.Add(-runtime.ExitSkew)}, false},
		{"an exit more than ExitSkew before the start is an earlier run's",
			runtime.Container{State: runtime.StateExited, StartedAt: start, FinishedAt: start.Add(-runtime.ExitSkew - time.Millisecond)}, true},
		{"an exited container that never finished since its start went down with the host",
			runtime.Container{State: runtime.StateExited, StartedAt: start}, true},
		{"an exited container whose finish is older than its start went down with the host",
			runtime.Container{State: runtime.StateExited, StartedAt: start, FinishedAt: start.Add(-time.Hour)}, true},
		{"a running container is not exited",
			runtime.Container{State: runtime.StateRunning, StartedAt: start}, false},
		{"without a start time nothing can be told",
			runtime.Container{State: runtime.StateExited}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.ExitUnrecorded(); got != tt.want {
				t.Errorf("ExitUnrecorded = %v, want %v", got, tt.want)
			}
		})
	}
}
