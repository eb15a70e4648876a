package agent

import (
	"net"
	"strconv"
	"testing"
)

// hold listens on a free 127.0.0.1 port with proto and returns it; the port
// is released when the test ends, or at once when release is set.
func hold(t *testing.T, proto string, release bool) uint16 {
	t.Helper()
	var addr string
	var closer func() error
	if proto == "tcp" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr, closer = l.Addr().String(), l.Close
	} else {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr, closer = c.LocalAddr().String(), c.Close
	}
	if release {
		_ = closer()
	} else {
		t.Cleanup(func() { _ = closer() })
	}
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return uint16(n)
}

func TestHostPortInUseSeesListenersThatAreNotContainers(t *testing.T) {
	checks := []struct {
		name  string
		check func(proto string, port uint16) (bool, error)
	}{
		{"the kernel's socket tables", func(proto string, port uint16) (bool, error) { return procNetHolds(procNet, proto, port) }},
		{"a bind on all addresses", bindHolds},
		{"HostPortInUse", HostPortInUse},
	}
	tests := []struct {
		name    string
		proto   string
		release bool
		want    bool
	}{
		{"a TCP listener on 127.0.0.1 holds its port", "tcp", false, true},
		{"a UDP socket on 127.0.0.1 holds its port", "udp", false, true},
		{"a released TCP port is free", "tcp", true, false},
		{"a released UDP port is free", "udp", true, false},
	}
	for _, c := range checks {
		for _, tt := range tests {
			t.Run(c.name+": "+tt.name, func(t *testing.T) {
				port := hold(t, tt.proto, tt.release)
				got, err := c.check(tt.proto, port)
				if err != nil || got != tt.want {
					t.Errorf("in use = %v, %v; want %v", got, err, tt.want)
				}
			})
		}
	}
	t.Run("an unknown protocol is an error", func(t *testing.T) {
		if _, err := HostPortInUse("sctp", 80); err == nil {
			t.Error("no error")
		}
	})
}
