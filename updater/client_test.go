package updater_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/updater"
)

// TestTheClientReadsARefusalWrittenBeforeItsRequestWasRead: the updater
// answers a refused peer at once and closes without reading its request.
// The peer then reads the refusal and after it a reset (the kernel resets a
// connection closed with unread data), or its send fails (broken pipe).
// The client returns the refusal. A stand-in server (a unit test of the
// client's one step) reads one byte, so the rest of the request is left
// unread, writes a refusal and closes.
func TestTheClientReadsARefusalWrittenBeforeItsRequestWasRead(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "u.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		if _, err := c.Read(make([]byte, 1)); err != nil {
			served <- err
			return
		}
		_, err = c.Write([]byte(`{"code":"refused","error":"peer refused: uid 65534 is not the agent's (0)"}`))
		served <- err
	}()

	err = updater.Client{Socket: sock}.Hello(context.Background(), "1.0.0")
	if !errors.Is(err, updater.ErrPeerRefused) {
		t.Errorf("hello: %v, want the refusal (ErrPeerRefused)", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("the stand-in server: %v", err)
	}
}
