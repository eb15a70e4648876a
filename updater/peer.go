package updater

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// PeerUID returns the uid of the process at the other end of a Unix
// socket connection, as the kernel recorded it when it connected
// (SO_PEERCRED): it cannot be forged by the peer.
func PeerUID(c *net.UnixConn) (uint32, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return 0, fmt.Errorf("peer credentials: %w", serr)
	}
	return cred.Uid, nil
}

// checkPeer returns nil when the peer of c is uid allowed, else an error
// wrapping ErrPeerRefused.
func checkPeer(c *net.UnixConn, allowed uint32) error {
	uid, err := PeerUID(c)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPeerRefused, err)
	}
	if uid != allowed {
		return fmt.Errorf("%w: uid %d is not the agent's (%d)", ErrPeerRefused, uid, allowed)
	}
	return nil
}
