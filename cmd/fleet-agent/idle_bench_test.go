package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// BenchmarkIdle runs the real agent binary (simulated runtime, heartbeat
// every 30 s) connected to an embedded server, idle for
// FLEET_IDLE_SECONDS (default 60), and reports its resident memory and the
// CPU it used. Goals (issue): ≤ 30 MB RSS, about zero CPU. Figures, not
// assertions.
func BenchmarkIdle(b *testing.B) {
	secs := 60
	if v, err := strconv.Atoi(os.Getenv("FLEET_IDLE_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "fleet-agent")
	build := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-o", bin, "./cmd/fleet-agent")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build: %v\n%s", err, out)
	}
	srv, _ := natstest.Provisioned(b)
	for range b.N {
		cmd := exec.Command(bin, "--device", "idle-1", "--nats-url", srv.ClientURL(), "--insecure-no-auth", "--runtime", "sim")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		time.Sleep(2 * time.Second) // start-up settles
		cpu0 := cpuTicks(b, cmd.Process.Pid)
		time.Sleep(time.Duration(secs) * time.Second)
		cpu1 := cpuTicks(b, cmd.Process.Pid)
		rss := rssKB(b, cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b.ReportMetric(float64(rss)/1024, "RSS-MB")
		b.ReportMetric(float64(cpu1-cpu0)/100/float64(secs)*100, "CPU-%")
	}
}

// cpuTicks is utime+stime of a process, in clock ticks (100 per second).
func cpuTicks(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

func rssKB(b *testing.B, pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
