package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
)

// podmanRuntime connects to the Podman API socket; its error names the
// flag and the usual fixes.
func podmanRuntime(ctx context.Context, socket string) (runtime.Runtime, error) {
	r, err := podman.New(ctx, podman.Options{URI: socket})
	if err != nil {
		return nil, fmt.Errorf("--podman-socket %s: %w: %s", socket, err, socketFix(socket))
	}
	return r, nil
}

// socketFix says how to make a Podman socket answer.
func socketFix(socket string) string {
	var b strings.Builder
	path := strings.TrimPrefix(socket, "unix://")
	if strings.HasPrefix(path, "/podman/") {
		b.WriteString("$XDG_RUNTIME_DIR was empty where this command line was written (root, or su/sudo without a login session): give the socket's full path; ")
	}
	b.WriteString("start the Podman API socket of the user that runs the agent, as that user " +
		"`systemctl --user enable --now podman.socket` (socket unix://$XDG_RUNTIME_DIR/podman/podman.sock, e.g. unix:///run/user/1000/podman/podman.sock), " +
		"as root `systemctl enable --now podman.socket` (socket unix:///run/podman/podman.sock), " +
		"and pass that socket to --podman-socket; `podman info --format '{{.Host.RemoteSocket.Path}}'` prints it")
	return b.String()
}
