package updater_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// hostilePeerEnv, set in the environment of this test binary, makes it a
// hostile peer instead of running the tests: with "idle" it opens
// connections and sends nothing; with "request" it sends a whole request
// on each and keeps its end open. Its arguments are the socket and the
// number of connections. It prints "ready" once every connection is open
// (and its request written), waits until its stdin is closed, then reads
// every connection to its end and prints one hostileAnswer per line.
const hostilePeerEnv = "FLEET_UPDATER_TEST_HOSTILE_PEER"

// hostileAnswer is what one connection of the hostile peer received.
type hostileAnswer struct {
	// Answer is what the updater wrote.
	Answer string `json:"answer"`
	// Closed: the updater closed the connection (end of file, or a reset
	// after its answer) before the peer's deadline.
	Closed bool `json:"closed"`
	// Err is how reading ended when not at the end of the data.
	Err string `json:"err,omitempty"`
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(hostilePeerEnv); mode != "" {
		if err := hostilePeer(mode, os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "hostile peer:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// hostilePeer is the hostile peer's mode of the test binary (see
// hostilePeerEnv).
func hostilePeer(mode string, args []string, in io.Reader, out io.Writer) error {
	if len(args) != 2 {
		return fmt.Errorf("want the socket and a number of connections, got %q", args)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return err
	}
	var conns []*net.UnixConn
	for range n {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: args[0], Net: "unix"})
		if err != nil {
			return err
		}
		conns = append(conns, c)
		switch mode {
		case "idle":
		case "request":
			// The updater may have refused and closed already: the write
			// then fails, and what it answered is still to be read.
			_, _ = c.Write([]byte(`{"v":1,"op":"hello","version":"6.6.6"}`))
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	deadline := time.Now().Add(60 * time.Second)
	enc := json.NewEncoder(out)
	for _, c := range conns {
		_ = c.SetReadDeadline(deadline)
		b, err := io.ReadAll(c)
		a := hostileAnswer{Answer: string(b), Closed: err == nil || errors.Is(err, syscall.ECONNRESET)}
		if err != nil {
			a.Err = err.Error()
		}
		if err := enc.Encode(a); err != nil {
			return err
		}
		_ = c.Close()
	}
	return nil
}

// hostilePeerProcess is a running hostile peer.
type hostilePeerProcess struct {
	stdin io.Closer
	lines chan string
	wait  chan error
}

// startHostilePeer runs this test binary as a hostile peer (see
// hostilePeerEnv) as uid and gid nobody, opening n connections to sock,
// and returns once they are open.
func startHostilePeer(t *testing.T, mode, sock string, n int) *hostilePeerProcess {
	t.Helper()
	bin := readableTestBinary(t)
	cmd := exec.Command(bin, sock, strconv.Itoa(n))
	cmd.Env = append(os.Environ(), hostilePeerEnv+"="+mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &hostilePeerProcess{stdin: stdin, lines: make(chan string, n+1), wait: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.wait <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		for range p.lines {
		}
		<-p.wait
	})
	if line := p.next(t); line != "ready" {
		t.Fatalf("the hostile peer said %q, want ready", line)
	}
	return p
}

// next returns the peer's next line of output; the test fails when it ends
// first or says nothing for a minute.
func (p *hostilePeerProcess) next(t *testing.T) string {
	t.Helper()
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatalf("the hostile peer ended: %v", <-p.wait)
		}
		return line
	case <-timer.C:
		t.Fatal("the hostile peer said nothing for a minute")
		return ""
	}
}

// answers closes the peer's stdin, so that it reads its connections to
// their end, and returns what each received.
func (p *hostilePeerProcess) answers(t *testing.T, n int) []hostileAnswer {
	t.Helper()
	_ = p.stdin.Close()
	var got []hostileAnswer
	for range n {
		var a hostileAnswer
		line := p.next(t)
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("the hostile peer printed %q: %v", line, err)
		}
		got = append(got, a)
	}
	return got
}

// readableTestBinary copies this test binary into a folder every user may
// read (the build's own folder is the builder's only).
func readableTestBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "updater.test")
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}
