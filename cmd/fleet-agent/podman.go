package main

import (
	"context"
	"errors"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// podmanRuntime connects the Podman runtime. Not wired in this build yet.
func podmanRuntime(context.Context, string) (runtime.Runtime, error) {
	return nil, errors.New("--runtime podman: not implemented in this build yet; use --runtime sim")
}
