package natscluster

import (
	"net"
	"strconv"
	"testing"
)

// TestPortsAreChosenOutsideTheEphemeralRangeDistinctAndBindable: a server
// killed and restarted on its ports must find them free, so none may be a
// port the kernel hands out to outgoing connections or :0 listeners.
func TestPortsAreChosenOutsideTheEphemeralRangeDistinctAndBindable(t *testing.T) {
	lo, hi, err := ephemeralRange()
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	ports, err := freePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != n {
		t.Fatalf("%d ports, want %d", len(ports), n)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p >= lo && p <= hi {
			t.Errorf("port %d is in the ephemeral range %d–%d", p, lo, hi)
		}
		if seen[p] {
			t.Errorf("port %d chosen twice", p)
		}
		seen[p] = true
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d: %v", p, err)
			continue
		}
		ln.Close()
	}
}
