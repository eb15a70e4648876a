package chaos_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// The test binary is also the agents' process: with envAgents set it runs
// the real agent daemon (agent.Connect, agent.Run on the simulated runtime)
// for the devices named there, so that the tests can SIGKILL an agent
// process.
const (
	envAgents = "FLEET_CHAOS_AGENTS" // comma-separated device ids
	envURL    = "FLEET_CHAOS_URL"    // every server's client URL
	envKeys   = "FLEET_CHAOS_KEYS"   // folder of the key files
)

// rereportInterval is the agents' re-report interval here.
const rereportInterval = 15 * time.Second

// maxGenerations bounds the generations a test rolls out: every device
// has their images locally.
const maxGenerations = 200

// image is generation gen's image.
func image(gen int64) string { return fmt.Sprintf("registry.example.com/chaos/api:v%d", gen) }

func TestMain(m *testing.M) {
	if devs := os.Getenv(envAgents); devs != "" {
		if err := runAgents(strings.Split(devs, ","), os.Getenv(envURL), os.Getenv(envKeys)); err != nil {
			fmt.Fprintln(os.Stderr, "agents:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../../k8s/config/crd"}})
}

// connEvent is one line an agent process writes on its stdout: a device's
// connection connected, disconnected or reconnected.
type connEvent struct {
	Device string    `json:"device"`
	Event  string    `json:"event"`
	At     time.Time `json:"at"`
	URL    string    `json:"url,omitempty"`
}

// runAgents runs the agents until stdin closes.
func runAgents(devices []string, url, keys string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var (
		outMu sync.Mutex
		enc   = json.NewEncoder(os.Stdout)
	)
	emit := func(e connEvent) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(e)
	}
	var images []string
	for g := int64(1); g <= maxGenerations; g++ {
		images = append(images, image(g))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(devices))
	for _, dev := range devices {
		key, err := credential.ReadKeyFile(keys + "/" + dev + ".json")
		if err != nil {
			return err
		}
		dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: url, Device: dev, Key: &key, Logger: log, NATSOptions: []nats.Option{
			nats.ConnectHandler(func(nc *nats.Conn) {
				emit(connEvent{Device: dev, Event: "connected", At: time.Now(), URL: nc.ConnectedUrl()})
			}),
			nats.DisconnectErrHandler(func(*nats.Conn, error) { emit(connEvent{Device: dev, Event: "disconnected", At: time.Now()}) }),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				emit(connEvent{Device: dev, Event: "reconnected", At: time.Now(), URL: nc.ConnectedUrl()})
			}),
		}})
		if err != nil {
			return err
		}
		if dc.Conn.IsConnected() {
			emit(connEvent{Device: dev, Event: "connected", At: time.Now(), URL: dc.Conn.ConnectedUrl()})
		}
		wg.Go(func() {
			defer dc.Close()
			dlog := log.With("device", dev)
			// A short re-report: a report lost while the reports stream
			// elects a leader is re-sent within it (the product's is 5
			// minutes).
			err := agent.Run(ctx, agent.Options{Device: dev, Conn: dc.Conn, Labels: map[string]string{"role": "chaos"}, AgentVersion: "chaos",
				RereportInterval: rereportInterval,
				Reconciler:       &agent.Reconciler{Runtime: sim.New(sim.Options{LocalImages: images}), Log: dlog}, Logger: dlog})
			if err != nil && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", dev, err)
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// agentProc is a running agent process, seen from the test.
type agentProc struct {
	devices []string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logs    *testenv.SyncBuffer
	done    chan struct{}
}

// startAgents starts an agent process for devices; every connection event
// it reports goes to events.
func startAgents(t *testing.T, url, keys string, devices []string, events chan<- connEvent) *agentProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &agentProc{devices: devices, cmd: exec.Command(exe, "-test.run", "^$"), logs: &testenv.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), envAgents+"="+strings.Join(devices, ","), envURL+"="+url, envKeys+"="+keys)
	p.cmd.Stderr = p.logs
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e connEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() && p.logs.String() != "" {
			t.Logf("logs of the agents of %v:\n%s", devices, tail(p.logs.String(), 40))
		}
	})
	return p
}

// kill SIGKILLs the process and waits for it.
func (p *agentProc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
