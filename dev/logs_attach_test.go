package dev_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// logsScript is the command of both services of logsDeployment: talk
// prints the demo secret (redacted on the device) and a tick every half
// second; flood prints 40 MB, more than a reader takes in one stream
// (devicelogs.DefaultMaxBytes).
const logsScript = `trap 'exit 0' TERM INT
if [ "$MODE" = flood ]; then
  head -c 40000000 /dev/zero | tr '\0' x | fold -w 999
else
  echo "db password $DB_PASSWORD"
  i=1; while :; do echo "tick $i"; i=$((i+1)); sleep 0.5; done &
fi
sleep 2147483647 & wait`

// logsDeployment runs talk and flood (DEV-talk, DEV-flood: container
// names are unique on the engine) on the attached device DEV.
const logsDeployment = `apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: DEV
spec:
  allowedGroups: [lab]
  targetSelector:
    matchLabels:
      attach-test: DEV
  rollout:
    strategy: Immediate
  score:
    type: PodmanV0
    data:
      services:
        - name: DEV-talk
          image: IMAGE
          env:
            - name: MODE
              value: talk
          secret_env:
            - name: DB_PASSWORD
              secret: apps/analysis/db
              key: password
          restart_policy: unless-stopped
        - name: DEV-flood
          image: IMAGE
          env:
            - name: MODE
              value: flood
          restart_policy: unless-stopped
`

var reTick = regexp.MustCompile(`(?m)^\S+ tick (\d+)$`)

// TestFleetLogsReadsARealAgentAttachedWithFleetEnrollDev is the attach
// path of device logs (ADR 0025): a real fleet-agent, enrolled with
// `fleet enroll --dev` against a fleet dev on free ports, runs a
// Deployment on real Podman, and the real `fleet logs` reads it: the
// lines come through with the secret redacted, -f prints new lines as
// they are printed until Ctrl-C, and a log over the reader's byte bound is
// cut off and said so. The dashboard of the same fleet dev reads it too:
// its open streams and cut-offs show in the scrape of /metrics/operator,
// and the device refuses a fifth stream of the CLI while the dashboard
// follows four.
func TestFleetLogsReadsARealAgentAttachedWithFleetEnrollDev(t *testing.T) {
	b, err := json.Marshal([]string{"sh", "-c", logsScript})
	if err != nil {
		t.Fatal(err)
	}
	r := newAttachRig(t, "attach-logs", "CMD "+string(b)+"\n", "logs")
	dev, dir, p := r.dev, r.dir, r.p
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	_, line := r.enroll(t, ctx, "attach-test="+dev)
	a := r.startAgent(t, line)
	defer a.stop(t)
	applyAttached(t, ctx, p, dev, strings.NewReplacer("DEV", dev, "IMAGE", r.image).Replace(logsDeployment), a)
	secret, err := os.ReadFile(filepath.Join(dir, "secrets", "demo-db.password"))
	if err != nil {
		t.Fatal(err)
	}
	talk, flood := dev+"/"+dev+"-talk", dev+"/"+dev+"-flood"

	t.Run("the lines come through with the secret redacted", func(t *testing.T) {
		var got string
		testenv.EventuallyErr(t, "fleet logs prints talk's ticks", time.Minute, func() error {
			var err error
			if got, err = p.script(ctx, "fleet logs lab/"+dev+" "+talk); err != nil {
				return fmt.Errorf("fleet logs: %w\n%s", err, got)
			}
			if !reTick.MatchString(got) {
				return fmt.Errorf("no tick yet:\n%s", got)
			}
			return nil
		})
		if !regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\S+Z db password \*\*\*$`).MatchString(got) {
			t.Errorf("fleet logs lacks the timestamped, redacted secret line:\n%s", tail(got, 2000))
		}
		if strings.Contains(got, strings.TrimSpace(string(secret))) {
			t.Error("fleet logs printed the secret's value")
		}
	})

	t.Run("-f prints new lines as they are printed until Ctrl-C", func(t *testing.T) {
		f := p.start(t, "exec fleet logs lab/"+dev+" "+talk+" -f --tail 1")
		first := 0
		testenv.EventuallyErr(t, "the follow's first tick", time.Minute, func() error {
			if m := reTick.FindStringSubmatch(f.out.String()); m != nil {
				first, _ = strconv.Atoi(m[1])
				return nil
			}
			return fmt.Errorf("no tick yet: %s", f.out.String())
		})
		// Ticks printed after the follow began: new lines, streamed.
		testenv.EventuallyErr(t, "three ticks printed after the first", time.Minute, func() error {
			ms := reTick.FindAllStringSubmatch(f.out.String(), -1)
			last, _ := strconv.Atoi(ms[len(ms)-1][1])
			if last < first+3 {
				return fmt.Errorf("the last tick is %d, the first %d", last, first)
			}
			return nil
		})
		if err := f.interrupt(); err != nil {
			t.Errorf("fleet logs -f after Ctrl-C: %v\n%s", err, f.err.String())
		}
		if !strings.Contains(f.err.String(), "stopped; the device was asked to stop sending") {
			t.Errorf("fleet logs -f did not say it stopped:\n%s", f.err.String())
		}
	})

	metricsURL := p.in.MetricsURL + "/operator"
	metric := func(t *testing.T, name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := metricSum(t, ctx, metricsURL, name, labels)
		if !ok {
			t.Fatalf("%s serves no %s", metricsURL, name)
		}
		return v
	}
	d := signInDashboard(t, ctx, p)
	t.Run("the dashboard's follows are open streams; the device refuses a fifth stream of the CLI", func(t *testing.T) {
		if n := metric(t, devicelogs.MetricOpenStreams, nil); n != 0 {
			t.Fatalf("%s is %v before any stream", devicelogs.MetricOpenStreams, n)
		}
		var follows []*sse
		for range 4 {
			s := d.events(t, ctx, dev, talk, "1", true)
			follows = append(follows, s)
			if ev := s.next(t, "line", "problem"); ev.name != "line" {
				t.Fatalf("the dashboard's follow: %s %s", ev.name, ev.data)
			}
		}
		testenv.EventuallyErr(t, "the scrape shows 4 open streams", time.Minute, func() error {
			if n := metric(t, devicelogs.MetricOpenStreams, nil); n != 4 {
				return fmt.Errorf("%s is %v", devicelogs.MetricOpenStreams, n)
			}
			return nil
		})
		out, err := p.script(ctx, "fleet logs lab/"+dev+" "+talk+" --tail 1")
		if err == nil || !strings.Contains(out, "too many log streams of this device are open on device lab/"+dev) ||
			!strings.Contains(out, "this device already answers 4 logs requests") {
			t.Errorf("fleet logs while the dashboard follows 4 streams: %v\n%s", err, out)
		}
		for _, s := range follows {
			s.close()
		}
		testenv.EventuallyErr(t, "the scrape shows no open stream once the pages are closed", time.Minute, func() error {
			if n := metric(t, devicelogs.MetricOpenStreams, nil); n != 0 {
				return fmt.Errorf("%s is %v", devicelogs.MetricOpenStreams, n)
			}
			return nil
		})
	})

	t.Run("a log over the byte bound is cut off, said and counted", func(t *testing.T) {
		bytesCut := map[string]string{"reason": devicelogs.ReasonBytes}
		if n := metric(t, devicelogs.MetricCutOffs, bytesCut); n != 0 {
			t.Fatalf("%s{reason=bytes} is %v before", devicelogs.MetricCutOffs, n)
		}
		// The CLI and the dashboard read flood's 40 MB side by side (the
		// agent sends 1 MiB/s a stream: over 32 s each).
		began := time.Now()
		var wg sync.WaitGroup
		var cliOut string
		var cliErr error
		wg.Go(func() { cliOut, cliErr = p.script(ctx, "fleet logs lab/"+dev+" "+flood+" >/dev/null") })
		s := d.events(t, ctx, dev, flood, "0", false)
		ev := s.next(t, "problem", "end")
		s.close()
		wg.Wait()
		t.Logf("the CLI's and the dashboard's reads of 40 MB side by side ended in %s", time.Since(began).Round(time.Millisecond))
		if cliErr == nil || !strings.Contains(cliOut, "cut off (bytes)") {
			t.Errorf("fleet logs of a 40 MB log: %v, want it cut off (bytes):\n%s", cliErr, tail(cliOut, 2000))
		}
		if ev.name != "problem" || !strings.Contains(ev.data, "cut off (bytes)") {
			t.Errorf("the dashboard's read of a 40 MB log ended with %s %s, want a problem saying it was cut off (bytes)", ev.name, ev.data)
		}
		if n := metric(t, devicelogs.MetricCutOffs, bytesCut); n != 1 {
			t.Errorf("%s{reason=bytes} is %v after the dashboard's cut-off, want 1", devicelogs.MetricCutOffs, n)
		}
	})
}

// proc is a command run with fleet dev's exports, still running.
type proc struct {
	cmd      *exec.Cmd
	out, err *testenv.SyncBuffer
	done     chan error
}

// start runs script like script does, without waiting for it.
func (p *devProc) start(t *testing.T, script string) *proc {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", p.exports+"\n"+script)
	cmd.Dir = filepath.Dir(mustAbs("."))
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "PATH" && name != "KUBECONFIG" && !strings.HasPrefix(name, "NATS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+systemPATH, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	pr := &proc{cmd: cmd, out: &testenv.SyncBuffer{}, err: &testenv.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = pr.out, pr.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { pr.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-pr.done
	})
	return pr
}

// interrupt sends SIGINT (Ctrl-C) and returns how the command exited.
func (pr *proc) interrupt() error {
	_ = pr.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-pr.done:
		pr.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		return fmt.Errorf("still running a minute after SIGINT")
	}
}

// sse is an open server-sent events stream of the dashboard.
type sse struct {
	cancel context.CancelFunc
	events chan sseEvent
}

// sseEvent is one event: its name and data.
type sseEvent struct{ name, data string }

// events opens the dashboard's logs stream of the device's container
// ("<deployment>/<service>") with the last lines lines first (0: all),
// following or not.
func (d *dashboard) events(t *testing.T, ctx context.Context, dev, container, lines string, follow bool) *sse {
	t.Helper()
	q := url.Values{"container": {container}, "tail": {lines}}
	if follow {
		q.Set("follow", "1")
	}
	sctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(sctx, http.MethodGet, d.base+"/devices/"+url.PathEscape(dev)+"/logs/stream?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Jar: d.c.Jar}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("the dashboard's logs stream: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		cancel()
		resp.Body.Close()
		t.Fatalf("the dashboard's logs stream: %s", resp.Status)
	}
	s := &sse{cancel: cancel, events: make(chan sseEvent, 64)}
	go func() {
		defer resp.Body.Close()
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case line == "" && ev.name != "":
				select {
				case s.events <- ev:
				case <-sctx.Done():
					return
				}
				ev = sseEvent{}
			}
		}
	}()
	t.Cleanup(s.close)
	return s
}

// next returns the next event named one of names, skipping the others.
func (s *sse) next(t *testing.T, names ...string) sseEvent {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("the dashboard's stream ended before an event %v", names)
			}
			for _, n := range names {
				if ev.name == n {
					return ev
				}
			}
		case <-deadline:
			t.Fatalf("no event %v from the dashboard's stream in 3 minutes", names)
		}
	}
}

// close closes the stream, as a browser leaving the page does.
func (s *sse) close() { s.cancel() }
