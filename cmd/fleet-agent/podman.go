package main

import (
	"context"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
)

// podmanRuntime connects to the Podman API socket.
func podmanRuntime(ctx context.Context, socket string) (runtime.Runtime, error) {
	return podman.New(ctx, podman.Options{URI: socket})
}
