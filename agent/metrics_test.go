package agent_test

import (
	"context"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/metrics"
	"github.com/nationtech/harmony-fleet/score"
)

// Series the tests read, as series names them.
const (
	passConverged = `fleet_agent_pass_duration_seconds_count{result="converged"}`
	passFailed    = `fleet_agent_pass_duration_seconds_count{result="failed"}`
	passError     = `fleet_agent_pass_duration_seconds_count{result="error"}`
	pullsOK       = `fleet_agent_image_pulls_total{result="ok"}`
	pullsError    = `fleet_agent_image_pulls_total{result="error"}`
	readsOK       = `fleet_agent_intent_reads_total{result="ok"}`
	readsError    = `fleet_agent_intent_reads_total{result="error"}`
	secretErrors  = `fleet_agent_secret_errors_total`
	buffered      = `fleet_agent_report_buffer_depth`
	connected     = `fleet_agent_connected`
)

func runtimeErrors(op string) string { return `fleet_agent_runtime_errors_total{op="` + op + `"}` }

var runtimeOps = []string{"list", "create", "start", "stop", "remove", "wait", "image_exists", "pull", "inspect", "healthcheck", "watch", "logs", "image_digest"}

// series gathers g: the value of every series by name{labels} (a
// histogram's sample count as name_count{labels}).
func series(t testing.TB, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			labels := ""
			if len(ls) > 0 {
				labels = "{" + strings.Join(ls, ",") + "}"
			}
			switch {
			case m.GetHistogram() != nil:
				out[f.GetName()+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				out[f.GetName()+labels] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[f.GetName()+labels] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// registry registers m on a pedantic registry (it checks every series
// against its description).
func registry(t testing.TB, m *agent.Metrics) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

func TestTheAgentRegistersItsFamilies(t *testing.T) {
	fams, err := metrics.Describe(agent.NewMetrics(nil).Collectors()...)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.Name+"{"+strings.Join(f.Labels, ",")+"}")
		if f.Help == "" {
			t.Errorf("%s has no help", f.Name)
		}
	}
	want := []string{
		"fleet_agent_connected{}",
		"fleet_agent_container_deaths_total{reason}",
		"fleet_agent_degraded_deployments{}",
		"fleet_agent_health_reports_total{type}",
		"fleet_agent_image_prune_failures_total{}",
		"fleet_agent_image_pulls_total{result}",
		"fleet_agent_intent_reads_total{result}",
		"fleet_agent_pass_duration_seconds{result}",
		"fleet_agent_report_buffer_depth{}",
		"fleet_agent_runtime_errors_total{op}",
		"fleet_agent_secret_errors_total{}",
		"fleet_agent_watch_mode{mode}",
	}
	if !slices.Equal(got, want) {
		t.Errorf("families %v, want %v", got, want)
	}
	if c := (*agent.Metrics)(nil).Collectors(); c != nil {
		t.Errorf("a nil Metrics has collectors %v", c)
	}
}

func TestAPassMovesTheSeriesOfItsResult(t *testing.T) {
	hub := "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	tests := []struct {
		name string
		// setup runs before the snapshot, act after it.
		setup func(e *agentEnv)
		act   func(e *agentEnv)
		// moves must rise; still must not change.
		moves, still []string
	}{
		{
			name:  "a converging pass is timed as converged and runs the stored value its notification carried, without a read",
			act:   func(e *agentEnv) { e.put(entry(e.t, 1, baseScore())) },
			moves: []string{passConverged},
			still: append([]string{passFailed, passError, readsOK, readsError, pullsOK, pullsError, secretErrors},
				mapped(runtimeOps, runtimeErrors)...),
		},
		{
			name: "a port conflict fails the pass and calls nothing on the engine that fails",
			setup: func(e *agentEnv) {
				e.foreign("web", []runtime.PortBinding{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}})
			},
			act:   func(e *agentEnv) { e.put(entry(e.t, 1, baseScore())) },
			moves: []string{passFailed},
			still: append([]string{passConverged, passError, pullsOK, pullsError, secretErrors}, mapped(runtimeOps, runtimeErrors)...),
		},
		{
			name: "an unreadable intent is a pass that could not run",
			act: func(e *agentEnv) {
				if _, err := e.kv.Put(e.ctx, "d1", []byte("not json")); err != nil {
					e.t.Fatal(err)
				}
			},
			moves: []string{passError, readsError},
			still: []string{passConverged, passFailed, readsOK, pullsOK, pullsError},
		},
		{
			name: "a missing image is pulled and the pass converges",
			act: func(e *agentEnv) {
				s := baseScore()
				s.Data.Services[1].Image, s.Data.Services[1].ImagePullSecret = hub, "hub-pull"
				e.put(entry(e.t, 1, s))
			},
			moves: []string{pullsOK, passConverged},
			still: []string{pullsError, runtimeErrors("pull"), passFailed, passError, secretErrors},
		},
		{
			name: "an image the registry does not have is a failed pull and a failed pass",
			act: func(e *agentEnv) {
				s := baseScore()
				s.Data.Services[1].Image = "reg.example/missing:v1"
				e.put(entry(e.t, 1, s))
			},
			moves: []string{pullsError, runtimeErrors("pull"), passFailed},
			still: []string{pullsOK, passConverged, passError, secretErrors},
		},
		{
			name: "a secret_env value the source does not have is a secret error",
			act: func(e *agentEnv) {
				s := baseScore()
				s.Data.Services[1].SecretEnv = []score.SecretEnv{{Name: "TOKEN", Secret: "lab/db", Key: "no-such-key"}}
				e.put(entry(e.t, 1, s))
			},
			moves: []string{secretErrors, passFailed},
			still: []string{passConverged, passError, pullsOK, pullsError},
		},
		{
			name: "a pull secret the source does not have is a secret error",
			act: func(e *agentEnv) {
				s := baseScore()
				s.Data.Services[1].Image, s.Data.Services[1].ImagePullSecret = hub, "no-such-pull-secret"
				e.put(entry(e.t, 1, s))
			},
			moves: []string{secretErrors, passFailed},
			still: []string{passConverged, passError, pullsOK, pullsError},
		},
		{
			name:  "an engine that is down is a pass that could not run and a failed list",
			setup: func(e *agentEnv) { e.rt.SetUnavailable(true) },
			act:   func(e *agentEnv) { e.put(entry(e.t, 1, baseScore())) },
			moves: []string{passError, runtimeErrors("list")},
			still: []string{passConverged, passFailed, pullsOK, pullsError, secretErrors},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := agent.NewMetrics(nil)
			reg := registry(t, m)
			var logs testenv.SyncBuffer
			// One Metrics in Options reaches the Reconciler too.
			e := startAgent(t, func(o *agent.Options) {
				o.Metrics, o.Logger = m, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			})
			if testenv.Poll(context.Background(), 20*time.Second, func() bool {
				s := series(t, reg)
				return s[passConverged]+s[passFailed]+s[passError] >= 1
			}) != nil {
				t.Fatalf("the first pass was not timed; agent logs:\n%s", logs.String())
			}
			if tc.setup != nil {
				tc.setup(e)
			}
			before := series(t, reg)
			tc.act(e)
			var now map[string]float64
			if testenv.Poll(context.Background(), 20*time.Second, func() bool {
				now = series(t, reg)
				for _, k := range tc.moves {
					if now[k] <= before[k] {
						return false
					}
				}
				return true
			}) != nil {
				for _, k := range tc.moves {
					t.Errorf("%s stayed at %v", k, now[k])
				}
				t.Fatalf("reports %+v\nagent logs:\n%s", e.statuses(), logs.String())
			}
			for _, k := range tc.still {
				if _, ok := before[k]; !ok {
					t.Errorf("no series %s", k)
				}
				if now[k] != before[k] {
					t.Errorf("%s moved from %v to %v", k, before[k], now[k])
				}
			}
		})
	}
}

func mapped(in []string, f func(string) string) []string {
	var out []string
	for _, s := range in {
		out = append(out, f(s))
	}
	return out
}

// TestNoSeriesNamesASecret: after passes that resolve a secret value and
// fail on a missing one, no label of any series holds a secret's value, its
// reference or its variable's name; every series carries the agent's
// constant device label.
func TestNoSeriesNamesASecret(t *testing.T) {
	m := agent.NewMetrics(prometheus.Labels{"device": "d1"})
	reg := registry(t, m)
	e := startAgent(t, func(o *agent.Options) { o.Metrics = m })
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	s := baseScore()
	s.Data.Services[1].SecretEnv = append(s.Data.Services[1].SecretEnv, score.SecretEnv{Name: "API_TOKEN", Secret: "lab/api", Key: "token"})
	e.put(entry(t, 2, s))
	e.waitStatus(2, events.WorkloadFailed)
	testenv.Eventually(t, "the failed secret to be counted", 20*time.Second, func() bool {
		return series(t, reg)[`fleet_agent_secret_errors_total{device="d1"}`] >= 1
	})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, sm := range f.GetMetric() {
			device := false
			for _, l := range sm.GetLabel() {
				device = device || l.GetName() == "device" && l.GetValue() == "d1"
				for _, secret := range []string{secretValue, "lab/db", "lab/api", "DB_PASSWORD", "API_TOKEN", "password", "token"} {
					if strings.Contains(l.GetName(), secret) || strings.Contains(l.GetValue(), secret) {
						t.Errorf("%s has label %s=%q, which names a secret", f.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
			if !device {
				t.Errorf("a series of %s lacks the device label: %v", f.GetName(), sm.GetLabel())
			}
		}
	}
}

// TestTheBufferAndConnectionFollowTheServer: while NATS is away the agent
// holds its reports (the depth rises) and is not connected; once it is
// back, the held reports are sent (the depth returns to 0) and it is
// connected again. After Run ends it is not connected.
func TestTheBufferAndConnectionFollowTheServer(t *testing.T) {
	w := newWorld(t)
	store := t.TempDir()
	srv := natstest.StartWith(t, natsembed.Options{StoreDir: store, Sync: natsembed.FastSync})
	u, _ := url.Parse(srv.ClientURL())
	port, _ := strconv.Atoi(u.Port())
	nc := natstest.Connect(t, srv, nats.CustomInboxPrefix("_INBOX_d1"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	m := agent.NewMetrics(nil)
	reg := registry(t, m)
	if v := series(t, reg)[connected]; v != 0 {
		t.Errorf("connected is %v before Run", v)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: "d1", Conn: nc, Reconciler: w.r, HeartbeatInterval: 25 * time.Millisecond, Metrics: m})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent.Run: %v", err)
			}
		}
	}
	defer stop()
	poll := func(what string, cond func(s map[string]float64) bool) {
		t.Helper()
		testenv.Eventually(t, what, 20*time.Second, func() bool { return cond(series(t, reg)) })
	}
	// After the first pass: one cut off by the outage would hold the
	// agent until its direct get times out.
	poll("connected, after the first pass", func(s map[string]float64) bool {
		return s[connected] == 1 && s[buffered] == 0 && s[passConverged]+s[passFailed]+s[passError] >= 1
	})

	srv.Shutdown()
	poll("not connected, with held reports", func(s map[string]float64) bool { return s[connected] == 0 && s[buffered] >= 1 })
	natstest.StartWith(t, natsembed.Options{StoreDir: store, Port: port, Sync: natsembed.FastSync})
	poll("connected again, with nothing held", func(s map[string]float64) bool { return s[connected] == 1 && s[buffered] == 0 })

	stop()
	if v := series(t, reg)[connected]; v != 0 {
		t.Errorf("connected is %v after Run ended", v)
	}
}
