package agent_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

func TestTheAgentSkipsIntentValuesAndCommandsItCannotDecode(t *testing.T) {
	skips := events.NewSkipCounter()
	var logs testenv.SyncBuffer
	e := startAgent(t, func(o *agent.Options) {
		o.Skips = skips
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)

	t.Run("an intent value it cannot decode is skipped and the device keeps running what it runs", func(t *testing.T) {
		other, _ := json.Marshal(events.DeviceIntent{Device: "d2", Deployments: []events.IntentEntry{entry(t, 9, baseScore())}})
		bad := entry(t, 9, baseScore())
		bad.Namespace = "../etc"
		badName, _ := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{bad}})
		for i, v := range [][]byte{[]byte("not json"), []byte(`{"stream":"KV_fleet-intent","seq":5}`), []byte(`[]`), other, badName} {
			if _, err := e.kv.Put(e.ctx, "d1", v); err != nil {
				t.Fatal(err)
			}
			// The agent read it and said so before the next one.
			if testenv.Poll(context.Background(), 20*time.Second, func() bool { return strings.Count(logs.String(), "intent not read") > i }) != nil {
				t.Fatalf("the agent never skipped intent value %d; log:\n%s", i, logs.String())
			}
		}
		// A valid value after the garbage: the agent is still there and
		// applies it; nothing was removed in between.
		s := baseScore()
		s.Data.Services[1].Image = "reg.example/api:v2"
		e.put(entry(t, 2, s))
		e.waitStatus(2, events.WorkloadConverged)
		for _, st := range e.statuses() {
			if st.Phase == events.WorkloadRemoved || st.Generation == 9 {
				t.Errorf("an undecodable intent value was acted on: %+v", st)
			}
		}
		if strings.Contains(logs.String(), "not json") || strings.Contains(logs.String(), "../etc") {
			t.Errorf("the log quotes an intent value:\n%s", logs.String())
		}
	})

	t.Run("a command it cannot decode is skipped, counted and never answered", func(t *testing.T) {
		forged, _ := events.New(events.Keys{Device: "d2"}, events.AgentCommand{Command: agent.CommandReconcileNow})
		forgedPayload, _ := forged.Marshal()
		base, _ := events.New(events.Keys{Device: "d1"}, events.AgentCommand{Command: agent.CommandReconcileNow})
		var sent int
		// One at a time, each counted before the next: a burst larger
		// than the agent's command buffer would be dropped by the client
		// as a slow consumer on a loaded machine, and the count would
		// depend on timing.
		send := func(payload []byte) {
			t.Helper()
			if _, err := e.st.JetStream().PublishMsg(e.ctx, &nats.Msg{Subject: "fleet.command.d1", Data: payload}); err != nil {
				t.Fatal(err)
			}
			sent++
			if testenv.Poll(context.Background(), 20*time.Second, func() bool { return skips.Skipped(events.StreamCommands, "") >= uint64(sent) }) != nil {
				t.Fatalf("command %d of the poison set not counted as skipped within 20s (%d counted)", sent, skips.Skipped(events.StreamCommands, ""))
			}
		}
		for _, tc := range poisontest.For(t, base) {
			if tc.Reason == events.ReasonInvalidData {
				continue // a valid envelope: answered with an error result
			}
			send(tc.Payload)
		}
		send(forgedPayload)
		real, err := events.New(events.Keys{Device: "d1"}, events.AgentCommand{Command: agent.CommandReconcileNow, RequestedBy: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Append(e.ctx, real); err != nil {
			t.Fatal(err)
		}
		var ids []string
		if testenv.Poll(context.Background(), 20*time.Second, func() bool {
			ids = ids[:0]
			for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.command", events.FromStart()) {
				if err != nil {
					t.Fatal(err)
				}
				res, err := events.Decode[events.CommandResult](r.Event)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, res.CommandID)
			}
			return len(ids) > 0 && skips.Skipped(events.StreamCommands, "") == uint64(sent)
		}) != nil {
			t.Fatalf("results %v, %d of %d commands counted as skipped", ids, skips.Skipped(events.StreamCommands, ""), sent)
		}
		if diff := cmp.Diff([]string{real.ID.String()}, ids); diff != "" {
			t.Errorf("command results (-want +got):\n%s", diff)
		}
		if !strings.Contains(logs.String(), "undecodable record skipped") || !strings.Contains(logs.String(), "subject=fleet.command.d1") {
			t.Errorf("no warning names the skipped command:\n%s", logs.String())
		}
	})
}
