package dev_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestTheBannerIsTheLastThingFleetDevPrintsAtStartup runs the fleet binary
// as a terminal shows it, its logs and its printed text in one stream: every
// startup record (the dashboard serving, fleet dev running) comes before
// the banner, so the banner is what the user sees last.
func TestTheBannerIsTheLastThingFleetDevPrintsAtStartup(t *testing.T) {
	needKube(t)
	bin, natsBin := fleetBinary(t), natsCLI(t)
	dir := t.TempDir()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "dev", "--data-dir", dir, "--nats-port", "-1", "--metrics-addr", "127.0.0.1:0", "--nats-cli", natsBin,
		"--devices", "1", "--runtime", "sim")
	cmd.Dir = repoRoot(t)
	cmd.Stdout, cmd.Stderr = w, w // one stream, as a terminal
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	var (
		mu  sync.Mutex
		out strings.Builder
	)
	banner := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			out.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.HasPrefix(sc.Text(), "See docs/fleet.md") {
				once.Do(func() { close(banner) })
			}
		}
	}()
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		stopped := make(chan error, 1)
		go func() { stopped <- cmd.Wait() }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-stopped
		}
		<-done
		for _, pid := range kubeChildren(cmd.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	select {
	case <-banner:
	case <-done:
		t.Fatalf("fleet dev exited before its banner:\n%s", out.String())
	case <-time.After(3 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no banner after 3 minutes:\n%s", out.String())
	}
	mu.Lock()
	text := out.String()
	mu.Unlock()
	start := strings.Index(text, "fleet dev is running (Ctrl-C stops it")
	if start < 0 {
		t.Fatalf("no banner's first line:\n%s", text)
	}
	for _, record := range []string{`msg="dashboard serving"`, `msg="fleet dev running"`} {
		at := strings.Index(text, record)
		switch {
		case at < 0:
			t.Errorf("the startup record %s was not logged before the banner ended:\n%s", record, text)
		case at > start:
			t.Errorf("the startup record %s comes after the banner began; the banner must be the last thing printed:\n%s", record, text[start:])
		}
	}
}

// TestFleetDevOnATakenNATSPortSaysSoNamingThePortAndTheFlag: another
// process holds the NATS port; fleet dev exits non-zero at once with one
// message that names the port and --nats-port (and -1), and leaves no
// process behind.
func TestFleetDevOnATakenNATSPortSaysSoNamingThePortAndTheFlag(t *testing.T) {
	needKube(t)
	bin, natsBin := fleetBinary(t), natsCLI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dev", "--data-dir", t.TempDir(), "--nats-port", port, "--metrics-addr", "127.0.0.1:0",
		"--nats-cli", natsBin, "--devices", "1", "--runtime", "sim")
	cmd.Dir = repoRoot(t)
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err == nil {
		t.Fatalf("fleet dev on a taken NATS port exited 0:\n%s", out.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("fleet dev on a taken NATS port still ran after 3 minutes:\n%s", out.String())
	}
	text := out.String()
	for _, want := range []string{"port " + port, "--nats-port", "-1"} {
		if !strings.Contains(text, want) {
			t.Errorf("fleet dev's message on a taken NATS port lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "fleet dev is running") {
		t.Errorf("fleet dev printed its banner on a taken NATS port:\n%s", text)
	}
}
