package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// procNet is where the kernel lists the host's sockets.
const procNet = "/proc/net"

// HostPortInUse reports whether a process on this host listens on port
// (proto "tcp" or "udp"), for Reconciler.PortInUse. It reads the kernel's
// socket tables (/proc/net/tcp, tcp6, udp, udp6): a TCP socket in the
// LISTEN state or any UDP socket bound to the port, on any address. Where
// those tables do not exist it tries to bind the port on all addresses and
// releases it at once; a port it may not bind (below the unprivileged
// start) is reported free. It never reports which process holds the port.
func HostPortInUse(proto string, port uint16) (bool, error) {
	if proto != "tcp" && proto != "udp" {
		return false, fmt.Errorf("host port %d: protocol %q: want tcp or udp", port, proto)
	}
	inUse, err := procNetHolds(procNet, proto, port)
	if errors.Is(err, fs.ErrNotExist) {
		return bindHolds(proto, port)
	}
	return inUse, err
}

// tcpListen is the state column of a listening TCP socket.
const tcpListen = "0A"

// procNetHolds reads dir/<proto> and dir/<proto>6; fs.ErrNotExist when
// neither exists.
func procNetHolds(dir, proto string, port uint16) (bool, error) {
	found := 0
	for _, name := range []string{proto, proto + "6"} {
		f, err := os.Open(dir + "/" + name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("host port %s/%d: %w", proto, port, err)
		}
		found++
		inUse, err := socketTableHolds(f, proto, port)
		_ = f.Close()
		if err != nil || inUse {
			return inUse, err
		}
	}
	if found == 0 {
		return false, fmt.Errorf("host port %s/%d: no socket table in %s: %w", proto, port, dir, fs.ErrNotExist)
	}
	return false, nil
}

// socketTableHolds scans one /proc/net socket table: lines of
// "sl local_address rem_address st …" with local_address "<hex ip>:<hex
// port>".
func socketTableHolds(f *os.File, proto string, port uint16) (bool, error) {
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 {
			continue
		}
		_, hexPort, ok := strings.Cut(fields[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || uint16(p) != port {
			continue
		}
		if proto == "udp" || fields[3] == tcpListen {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("host port %s/%d: read %s: %w", proto, port, f.Name(), err)
	}
	return false, nil
}

// bindHolds tries to bind the port on all addresses: in use when the
// kernel says EADDRINUSE.
func bindHolds(proto string, port uint16) (bool, error) {
	addr := ":" + strconv.Itoa(int(port))
	var err error
	if proto == "tcp" {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return false, l.Close()
		}
	} else {
		var c net.PacketConn
		if c, err = net.ListenPacket("udp", addr); err == nil {
			return false, c.Close()
		}
	}
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return true, nil
	case errors.Is(err, syscall.EACCES):
		return false, nil
	default:
		return false, fmt.Errorf("host port %s/%d: %w", proto, port, err)
	}
}
