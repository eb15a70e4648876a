package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// cmdImage builds an image whose command is sh -c script.
func cmdImage(t *testing.T, name, script string) string {
	t.Helper()
	b, err := json.Marshal([]string{"sh", "-c", script})
	if err != nil {
		t.Fatal(err)
	}
	return podmantest.BuildImage(t, name, "CMD "+string(b)+"\n")
}

// The services of the logs Deployment: quiet prints a fixed log (its
// secret, hostile bytes, 20 numbered lines, more than a second between
// the 10th and the 11th: Podman 4.3's times are whole seconds) and sleeps; ticker prints a
// start line naming its run, five ticks, and exits to be restarted;
// chatty prints 10 MB in 100-byte lines and sleeps.
const (
	quietScript = `echo "login with $DB_PASSWORD refused"; printf 'bad \377\376 bytes \033[2J cleared \033]0;title\007\n'; ` +
		`i=1; while [ $i -le 20 ]; do echo "line $i"; [ $i = 10 ] && sleep 1.2; i=$((i+1)); done; exec sleep 3600`
	tickerScript = `echo "start $(cat /proc/sys/kernel/random/uuid)"; i=1; while [ $i -le 5 ]; do echo "tick $i"; sleep 0.2; i=$((i+1)); done; exit 1`
	chattyScript = `head -c 10000000 /dev/zero | tr '\0' 'x' | fold -w 99; exec sleep 3600`
)

// logsWorld runs the logs Deployment under an agent on real Podman and
// a devicelogs.Reader on the same NATS server.
type logsWorld struct {
	w  *podmanWorld
	d  *podmanDaemon
	rd *devicelogs.Reader
}

func newLogsWorld(t *testing.T, services ...string) *logsWorld {
	w := newPodmanWorld(t)
	w.r.Secrets = secrets{"lab/db#password": secretValue}
	scripts := map[string]string{"quiet": quietScript, "ticker": tickerScript, "chatty": chattyScript}
	var svcs []score.Service
	for _, s := range services {
		svc := score.Service{Name: w.name(s), Image: cmdImage(t, "logs-"+s, scripts[s]),
			SecretEnv: []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/db", Key: "password"}}}
		if s == "ticker" {
			svc.RestartPolicy = "always"
		}
		svcs = append(svcs, svc)
	}
	d := w.runDaemon(t, agent.Options{StateDir: t.TempDir()})
	d.put(1, score.Score{Data: score.PodmanV0{Services: svcs}})
	testenv.Eventually(t, "generation 1 converges", testTimeout(t), func() bool { return d.reported(1, events.WorkloadConverged) })
	rd, err := devicelogs.New(devicelogs.Options{Conn: d.nc, Store: d.st})
	if err != nil {
		t.Fatal(err)
	}
	return &logsWorld{w: w, d: d, rd: rd}
}

// open opens a stream of service.
func (lw *logsWorld) open(t *testing.T, service string, change func(*devicelogs.Request)) *devicelogs.Stream {
	t.Helper()
	r := devicelogs.Request{Namespace: lw.w.ns, Device: lw.w.device, Deployment: "analysis", Service: lw.w.name(service),
		Who: devicelogs.Who{User: "ada", Via: events.ViaCLI}}
	if change != nil {
		change(&r)
	}
	s, err := lw.rd.Open(lw.w.ctx, r, devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// read reads s until io.EOF, until stop says so, or an error.
func read(t *testing.T, s *devicelogs.Stream, stop func([]events.LogLine) bool) ([]events.LogLine, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout(t))
	defer cancel()
	var out []events.LogLine
	for {
		lines, err := s.Next(ctx)
		out = append(out, lines...)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if stop != nil && stop(out) {
			return out, nil
		}
	}
}

func texts(lines []events.LogLine) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Text
	}
	return out
}

func TestLogsOfAServiceOnRealPodman(t *testing.T) {
	lw := newLogsWorld(t, "quiet")
	all := func() []events.LogLine {
		var got []events.LogLine
		testenv.Eventually(t, "the service printed its 22 lines", testTimeout(t), func() bool {
			s := lw.open(t, "quiet", nil)
			var err error
			got, err = read(t, s, nil)
			if err != nil {
				t.Fatal(err)
			}
			return len(got) == 22
		})
		return got
	}()
	t.Run("a secret value the container prints is redacted", func(t *testing.T) {
		if got := all[0].Text; got != "login with *** refused" {
			t.Fatalf("first line %q, want the secret redacted", got)
		}
		for _, l := range all {
			if strings.Contains(l.Text, secretValue) {
				t.Fatalf("a line shows the secret: %q", l.Text)
			}
		}
	})
	t.Run("invalid UTF-8 and terminal escapes arrive valid and print escaped", func(t *testing.T) {
		want := "bad \uFFFD bytes \x1b[2J cleared \x1b]0;title\x07"
		if all[1].Text != want {
			t.Fatalf("hostile line %q, want %q", all[1].Text, want)
		}
		if got, want := devicelogs.PrintableLine(all[1].Text), `bad `+"\uFFFD"+` bytes \x1b[2J cleared \x1b]0;title\x07`; got != want {
			t.Fatalf("printed %q, want %q", got, want)
		}
	})
	t.Run("every line has the engine's time", func(t *testing.T) {
		for _, l := range all {
			if l.Time.IsZero() || time.Since(l.Time) > 10*time.Minute {
				t.Fatalf("line %q has time %v", l.Text, l.Time)
			}
		}
	})
	t.Run("tail sends the last lines", func(t *testing.T) {
		got, err := read(t, lw.open(t, "quiet", func(r *devicelogs.Request) { r.Tail = 3 }), nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"line 18", "line 19", "line 20"}, texts(got)); diff != "" {
			t.Fatalf("tail 3 (-want +got):\n%s", diff)
		}
	})
	t.Run("since sends the lines recorded from then on", func(t *testing.T) {
		since := all[12].Time // line 11's
		got, err := read(t, lw.open(t, "quiet", func(r *devicelogs.Request) { r.Since = since }), nil)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, l := range all {
			if !l.Time.Before(since) {
				want = append(want, l.Text)
			}
		}
		if diff := cmp.Diff(want, texts(got)); diff != "" || len(got) == 0 || len(got) == len(all) {
			t.Fatalf("since %v (-want +got):\n%s", since, diff)
		}
	})
	t.Run("a service the Deployment does not have is said plainly", func(t *testing.T) {
		_, err := read(t, lw.open(t, "nope", nil), nil)
		var de *devicelogs.DeviceError
		if !errors.As(err, &de) || !strings.Contains(de.Message, "has no service") {
			t.Fatalf("stream ended with %v, want the device saying the service does not exist", err)
		}
	})
}

// TestFollowingALogGoesOnAcrossARestartOnRealPodman: the ticker exits and
// Podman restarts it; a follow sees the next run's start without the
// first run's lines again.
func TestFollowingALogGoesOnAcrossARestartOnRealPodman(t *testing.T) {
	lw := newLogsWorld(t, "ticker")
	s := lw.open(t, "ticker", func(r *devicelogs.Request) { r.Follow = true; r.Tail = 1 })
	var starts []string
	got, err := read(t, s, func(ls []events.LogLine) bool {
		starts = starts[:0]
		for _, l := range ls {
			if strings.HasPrefix(l.Text, "start ") {
				starts = append(starts, l.Text)
			}
		}
		return len(starts) >= 2
	})
	if err != nil {
		t.Fatalf("follow ended with %v after %q", err, texts(got))
	}
	if starts[0] == starts[1] {
		t.Fatalf("the same run's start came twice: %q", texts(got))
	}
	// From the first start on, each run's lines come once, none lost.
	i := 0
	for !strings.HasPrefix(got[i].Text, "start ") {
		i++
	}
	want := []string{starts[0], "tick 1", "tick 2", "tick 3", "tick 4", "tick 5", starts[1]}
	if diff := cmp.Diff(want, texts(got[i:min(len(got), i+len(want))])); diff != "" {
		t.Fatalf("a run's lines were lost or sent again (-want +got):\n%s\nall: %q", diff, texts(got))
	}
}

// TestTenMegabytesOfLogOnRealPodman: a container that printed 10 MB is
// read whole within the bounds, and the rate is reported.
func TestTenMegabytesOfLogOnRealPodman(t *testing.T) {
	lw := newLogsWorld(t, "chatty")
	const wantLines = 10000000/99 + 1
	var got []events.LogLine
	var took time.Duration
	testenv.Eventually(t, "the whole 10 MB is read", testTimeout(t), func() bool {
		start := time.Now()
		var err error
		got, err = read(t, lw.open(t, "chatty", nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		took = time.Since(start)
		return len(got) >= wantLines
	})
	n := 0
	for _, l := range got {
		n += len(l.Text)
	}
	if n != 10000000 {
		t.Fatalf("read %d bytes in %d lines, want 10000000", n, len(got))
	}
	t.Logf("10 MB, %d lines in %s: %.0f lines/s", len(got), took, float64(len(got))/took.Seconds())
}
