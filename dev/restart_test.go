package dev_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// freePort is a TCP port of 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lastHeartbeat is when the device's last heartbeat was stored (zero:
// none yet), read as the nats CLI user fleet dev printed.
func lastHeartbeat(t *testing.T, ctx context.Context, p *devProc, device string) time.Time {
	t.Helper()
	pw, err := os.ReadFile(p.in.AdminPasswordFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(p.in.NATSURL, nats.UserInfo(p.in.AdminUser, strings.TrimSpace(string(pw))))
	if err != nil {
		return time.Time{}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := events.ReportSubject(device, events.ReportHeartbeat)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, events.StreamLiveness)
	if err != nil {
		return time.Time{}
	}
	m, err := s.GetLastMsgForSubject(ctx, subj)
	if err != nil {
		return time.Time{}
	}
	return m.Time
}

// TestAnAttachedDeviceSurvivesAFleetDevRestart: a device attached with
// `fleet enroll --dev` and the real fleet-agent (simulated runtime) keeps
// working when fleet dev stops and starts again on the same data folder:
// the provider kept its machine user and key, so the agent's next grant is
// accepted and its heartbeats arrive again, with no re-enrollment; every
// line the agent logged meanwhile is a JSON record.
func TestAnAttachedDeviceSurvivesAFleetDevRestart(t *testing.T) {
	needKube(t)
	natsCLI(t)
	fleet, agentBin := fleetBinary(t), agentBinary(t)
	dir := t.TempDir()
	// The agent's --nats-url must stay right across the restart: a fixed
	// port, as the default 4222 is.
	flags := []string{"--devices", "0", "--runtime", "sim", "--nats-port", strconv.Itoa(freePort(t))}
	p := startDev(t, dir, flags...)
	defer p.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	dev := "restart-" + randomHex(t, 3)
	keyFile := filepath.Join(dir, "devices", dev+".key.json")
	_, agentLine := enrollDev(t, ctx, fleet, dir, dev, "--agent-key-file", keyFile)
	// The printed line, on the simulated runtime, heartbeating every
	// second.
	args := strings.Fields(agentLine)
	var line []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--runtime", "--podman-socket":
			i++
			continue
		}
		line = append(line, args[i])
	}
	line = append(line, "--runtime", "sim", "--heartbeat", "1s")
	line[0] = agentBin // fleet-agent, on the device's PATH
	a := startAgent(t, line, cleanEnv())
	defer a.stop(t)
	if err := testenv.Poll(ctx, 2*time.Minute, func() bool { return !lastHeartbeat(t, ctx, p, dev).IsZero() }); err != nil {
		t.Fatalf("the attached device sent no heartbeat (%v):\n%s", err, tail(a.logs.String(), 3000))
	}

	p.stop(t)
	restarted := time.Now()
	p = startDev(t, dir, flags...)
	defer p.stop(t)
	var last time.Time
	if err := testenv.Poll(ctx, 4*time.Minute, func() bool {
		last = lastHeartbeat(t, ctx, p, dev)
		return last.After(restarted)
	}); err != nil {
		t.Fatalf("after fleet dev restarted, the attached device sent no heartbeat (last %s, restart %s; %v):\nagent:\n%s\nfleet dev:\n%s",
			last, restarted, err, tail(a.logs.String(), 4000), tail(p.stderr.String(), 3000))
	}
	for _, l := range strings.Split(strings.TrimSpace(a.logs.String()), "\n") {
		if !json.Valid([]byte(l)) {
			t.Errorf("the agent logged a line that is not a JSON record: %s", l)
		}
	}
	checkEnv(t, ctx, fleet, p)
}

// checkEnv checks that `fleet dev env` prints the export lines the
// running fleet dev printed, and that neither its output nor its logs
// carry the NATS server's plaintext-password notice (fleet dev's static
// users have passwords in 0600 files on purpose).
func checkEnv(t *testing.T, ctx context.Context, fleet string, p *devProc) {
	t.Helper()
	env := exec.CommandContext(ctx, fleet, "dev", "env", "--data-dir", p.dataDir)
	env.Env = cleanEnv()
	out, err := env.Output()
	if err != nil {
		t.Fatalf("fleet dev env: %v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), p.exports; got != want {
		t.Errorf("fleet dev env printed\n%s\nwant the printed export lines\n%s", got, want)
	}
	if strings.Contains(p.stderr.String(), "Plaintext passwords") {
		t.Errorf("fleet dev logged the NATS server's plaintext-password notice:\n%s", tail(p.stderr.String(), 2000))
	}
	if !strings.Contains(p.out, "fleet dev env") {
		t.Errorf("the banner does not say how to print the export lines again:\n%s", p.out)
	}
}
