package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/projections"
)

const (
	historyUser     = "fleet-dev-admin"
	historyPassword = "pw-not-to-be-printed"
)

// historyServer starts a server with a user and password, as fleet dev
// does for the nats CLI, and stores a history the operator would have
// written: api rolls out canary first and succeeds, web's canary fails. It
// returns the URL and a time between api's canary stage and its release.
func historyServer(t *testing.T) (string, time.Time) {
	t.Helper()
	srv := natstest.StartWith(t, natsembed.Options{Sync: natsembed.FastSync,
		Config: fmt.Sprintf(`authorization { users: [ { user: %q, password: %q } ] }`, historyUser, historyPassword)})
	nc := natstest.Connect(t, srv, nats.UserInfo(historyUser, historyPassword))
	st, err := events.NewStore(nc, events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	rollouts := map[string]projections.Rollout{}
	add := func(keys events.Keys, d events.Data, opts ...events.Option) {
		t.Helper()
		ev, err := events.New(keys, d, opts...)
		if err != nil {
			t.Fatal(err)
		}
		// The operator appends; a device's report is published as the
		// agent does (never acknowledged) and waited for until stored.
		natstest.Write(t, ctx, st, ev)
		name := keys.Name
		if w, ok := d.(events.WorkloadStatus); ok {
			name = w.Deployment
		}
		rollouts[name] = rollouts[name].Apply(ev)
		// Decide as the operator's rollout runner does.
		for _, tr := range rollouts[name].Next() {
			r := rollouts[name]
			ev, err := events.New(events.Keys{Namespace: "lab", Name: name}, tr, events.WithCorrelation(r.UID, r.Generation))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Append(ctx, ev); err != nil {
				t.Fatal(err)
			}
			rollouts[name] = r.Apply(ev)
		}
	}
	rev := func(name, uid string, canary string) events.DeploymentRevisionCreated {
		d := events.DeploymentRevisionCreated{UID: uid, Generation: 1, RevisionID: "1-" + uid, ScoreDigest: "sha256:" + name,
			Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: []string{"sim-1", "sim-2"}, Canaries: []string{canary}}
		add(events.Keys{Namespace: "lab", Name: name}, d, events.WithCorrelation(uid, 1))
		return d
	}
	report := func(dev, name string, r events.DeploymentRevisionCreated, phase events.WorkloadPhase, errText string) {
		add(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: name, UID: r.UID, Generation: 1,
			RevisionID: r.RevisionID, Phase: phase, Error: errText, Since: time.Now().UTC()}, events.WithCorrelation(r.UID, 1))
	}
	add(events.Keys{Device: "sim-1"}, events.DeviceHeartbeat{AgentVersion: "0.1.0", Uptime: time.Minute})
	api := rev("api", "a1", "sim-1")
	canaryStage := time.Now()
	report("sim-1", "api", api, events.WorkloadConverged, "")
	report("sim-2", "api", api, events.WorkloadConverged, "")
	web := rev("web", "w1", "sim-2")
	report("sim-2", "web", web, events.WorkloadFailed, "init container exited with 3")
	// A TaskRun: sim-1 upgraded its agent, sim-2's upgrade failed.
	upgrade := events.Keys{Namespace: "lab", Name: "agent-v2"}
	for _, ev := range []struct {
		keys events.Keys
		d    events.Data
	}{
		{upgrade, events.TaskRunCreated{UID: "t1", Generation: 1, Task: events.TaskAgentUpgrade, Targets: []string{"sim-1", "sim-2"},
			Agent: &events.AgentArtifact{URL: "https://downloads.example.com/fleet-agent", SHA256: strings.Repeat("ab", 32), Version: "0.2.0"}}},
		{events.Keys{Device: "sim-1"}, events.TaskStatus{Namespace: "lab", TaskRun: "agent-v2", UID: "t1", Task: events.TaskAgentUpgrade,
			Phase: events.TaskSucceeded, AgentVersion: "0.2.0", Since: time.Now().UTC()}},
		{events.Keys{Device: "sim-2"}, events.TaskStatus{Namespace: "lab", TaskRun: "agent-v2", UID: "t1", Task: events.TaskAgentUpgrade,
			Phase: events.TaskFailed, Error: "sha256 mismatch", AgentVersion: "0.1.0", Since: time.Now().UTC()}},
	} {
		e, err := events.New(ev.keys, ev.d)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Write(t, ctx, st, e)
	}
	return srv.ClientURL(), canaryStage
}

func TestFleetHistoryAnswersFromTheStreams(t *testing.T) {
	url, canaryStage := historyServer(t)
	creds := []string{"--server", url, "--user", historyUser, "--password", historyPassword}
	noEnv := func(string) string { return "" }
	tests := []struct {
		name   string
		args   []string
		env    func(string) string
		want   []string
		decode any // when set, the output must decode into it as JSON
	}{
		{"a Deployment's timeline shows its revision, transitions and per-device results",
			append([]string{"deployment", "lab/api"}, creds...), noEnv,
			[]string{"Deployment lab/api", "now: revision 1-a1 (generation 1) Succeeded", "REVISIONS", "[sim-1 sim-2]", "RESULTS",
				"canary  Converged", "TIMELINE", "rollout.canary-stage", "released to [sim-2]", "rollout.succeeded"}, nil},
		{"a failed canary's timeline says release was blocked",
			append([]string{"deployment", "lab/web"}, creds...), noEnv,
			[]string{"canary sim-2 failed: init container exited with 3; release blocked", "rollout.failed"}, nil},
		{"flags may follow the query and json decodes into the timeline",
			append(append([]string{"deployment"}, creds...), "lab/api", "-o", "json"), noEnv,
			[]string{`"revisionId": "1-a1"`}, &history.DeploymentTimeline{}},
		{"a TaskRun's timeline shows every device's result",
			append([]string{"taskrun", "lab/agent-v2"}, creds...), noEnv,
			[]string{"TaskRun lab/agent-v2", "task agent-upgrade (uid t1)", "agent 0.2.0", "now: Failed, 1/2 succeeded, 1 failed", "RESULTS",
				"sim-1   Succeeded", "sim-2   Failed", "sha256 mismatch", "TIMELINE", "taskrun.created"}, nil},
		{"a TaskRun's timeline as json decodes into the timeline",
			append([]string{"taskrun", "lab/agent-v2", "-o", "json"}, creds...), noEnv,
			[]string{`"uid": "t1"`, `"agentVersion": "0.2.0"`}, &history.TaskRunTimeline{}},
		{"a device's timeline shows the intent it received and its heartbeats summarised",
			append([]string{"device", "sim-2"}, creds...), noEnv,
			[]string{"Device sim-2", "intent changed by rollout.released: +lab/api generation 1", "lab/web generation 1: Failed",
				"freezes it as a canary", "DESIRED NOW"}, nil},
		{"the fleet between api's canary stage and its release has only the canary desired",
			append([]string{"fleet", "--at", canaryStage.UTC().Format(time.RFC3339Nano)}, creds...), noEnv,
			[]string{"lab/api", "Canary", "0/2", "1 (1-a1)"}, nil},
		{"the fleet now as json decodes into the fleet state",
			append([]string{"fleet", "--at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "-o", "json"}, creds...), noEnv,
			[]string{`"phase": "Failed"`, `"phase": "Succeeded"`}, &history.FleetState{}},
		{"the connection comes from NATS_URL, NATS_USER and NATS_PASSWORD as fleet dev prints them",
			[]string{"deployment", "lab/api"}, func(k string) string {
				return map[string]string{"NATS_URL": url, "NATS_USER": historyUser, "NATS_PASSWORD": historyPassword}[k]
			}, []string{"Deployment lab/api"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := historyCmd(context.Background(), tc.args, &out, &errOut, tc.env); err != nil {
				t.Fatalf("fleet history %v: %v\n%s", tc.args, err, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			if tc.decode != nil {
				if err := json.Unmarshal(out.Bytes(), tc.decode); err != nil {
					t.Errorf("output is not the answer's JSON: %v\n%s", err, out.String())
				}
			}
			if strings.Contains(out.String()+errOut.String(), historyPassword) {
				t.Error("the password was printed")
			}
		})
	}
	t.Run("the canary-stage fleet has sim-2 targeted but without intent", func(t *testing.T) {
		var out bytes.Buffer
		args := append([]string{"fleet", "--at", canaryStage.UTC().Format(time.RFC3339Nano), "-o", "json"}, creds...)
		if err := historyCmd(context.Background(), args, &out, &bytes.Buffer{}, noEnv); err != nil {
			t.Fatal(err)
		}
		var fs history.FleetState
		if err := json.Unmarshal(out.Bytes(), &fs); err != nil {
			t.Fatal(err)
		}
		if len(fs.Devices) != 2 || fs.Devices[1].Device != "sim-2" || len(fs.Devices[1].Desired) != 0 || len(fs.Devices[0].Desired) != 1 {
			t.Errorf("devices %+v", fs.Devices)
		}
		if len(fs.Deployments) != 1 || fs.Deployments[0].Phase != "Canary" {
			t.Errorf("deployments %+v", fs.Deployments)
		}
	})
}

func TestFleetHistoryRefusesBadInputNamingTheFix(t *testing.T) {
	url, _ := historyServer(t)
	creds := []string{"--server", url, "--user", historyUser, "--password", historyPassword}
	noEnv := func(string) string { return "" }
	tests := []struct {
		name string
		args []string
		want []string // every one must be in the error
	}{
		{"no query says which exist", nil, []string{"no query", "deployment, taskrun, device or fleet"}},
		{"a TaskRun without a namespace names the form", append([]string{"taskrun", "upgrade"}, creds...),
			[]string{"history taskrun", `"upgrade" is not <namespace>/<name>`}},
		{"an unknown TaskRun has no events", append([]string{"taskrun", "lab/nope"}, creds...),
			[]string{"no events found", "TaskRun lab/nope", "check the namespace and name"}},
		{"an unknown query says which exist", append([]string{"timeline"}, creds...), []string{`unknown query "timeline"`}},
		{"a time that is not RFC 3339 names --at and the format", append([]string{"fleet", "--at", "yesterday"}, creds...),
			[]string{"--at", `"yesterday"`, "RFC 3339", "2026-01-02T15:04:05Z"}},
		{"a time without a zone is refused", append([]string{"fleet", "--at", "2026-01-02T15:04:05"}, creds...), []string{"--at", "RFC 3339"}},
		{"the fleet without --at says it is required", append([]string{"fleet"}, creds...), []string{"--at is required"}},
		{"--at on a timeline is refused", append([]string{"device", "sim-1", "--at", "2026-01-02T15:04:05Z"}, creds...),
			[]string{"--at applies to `fleet history fleet` only"}},
		{"a Deployment without a namespace names the form", append([]string{"deployment", "api"}, creds...),
			[]string{`"api" is not <namespace>/<name>`}},
		{"an unknown Deployment has no events", append([]string{"deployment", "lab/nope"}, creds...),
			[]string{"no events found", "lab/nope", "check the namespace and name"}},
		{"an unknown device has no events", append([]string{"device", "sim-9"}, creds...), []string{"no events found", "sim-9"}},
		{"a device id with a dot is refused", append([]string{"device", "sim.1"}, creds...), []string{`"sim.1"`}},
		{"an unknown output format names -o", append([]string{"deployment", "lab/api", "-o", "yaml"}, creds...),
			[]string{"-o", `"yaml"`, "text or json"}},
		{"a wrong password names the flags and never the password",
			[]string{"deployment", "lab/api", "--server", url, "--user", historyUser, "--password", "wrong-pw"},
			[]string{"--user/--password or --creds"}},
		{"a password without a user names --user", []string{"deployment", "lab/api", "--server", url, "--password", historyPassword},
			[]string{"--password needs --user"}},
		{"an unreachable server names --server and NATS_URL", []string{"deployment", "lab/api", "--server", "nats://127.0.0.1:1"},
			[]string{"nats://127.0.0.1:1", "--server or NATS_URL"}},
		{"a password in the server URL is redacted", []string{"deployment", "lab/api", "--server", "nats://u:url-secret@127.0.0.1:1"},
			[]string{"nats://u:xxxxx@127.0.0.1:1"}},
		{"creds and a user together are refused", append([]string{"deployment", "lab/api", "--creds", "/nonexistent.creds"}, creds...),
			[]string{"--creds and --user/--password exclude each other"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := historyCmd(context.Background(), tc.args, &out, &errOut, noEnv)
			if err == nil {
				t.Fatalf("no error; output:\n%s", out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			for _, secret := range []string{historyPassword, "wrong-pw", "url-secret"} {
				if strings.Contains(err.Error()+errOut.String(), secret) {
					t.Errorf("a password was printed: %v", err)
				}
			}
		})
	}
}

func TestFleetHistoryUsageNeverPrintsTheEnvironmentsPassword(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"NATS_URL": "nats://u:url-secret-42@127.0.0.1:1", "NATS_USER": "admin", "NATS_PASSWORD": "env-secret-42"}[k]
	}
	for _, args := range [][]string{{"-h"}, nil, {"--no-such-flag"}, {"timeline"}} {
		var out, errOut bytes.Buffer
		err := historyCmd(context.Background(), args, &out, &errOut, env)
		text := out.String() + errOut.String()
		if err != nil {
			text += err.Error()
		}
		if strings.Contains(text, "env-secret-42") || strings.Contains(text, "url-secret-42") {
			t.Errorf("fleet history %v printed a password from the environment:\n%s", args, text)
		}
	}
}

// TestAnUnknownHistoryQueryPrintsOnlyTheError: an unknown query is
// answered by one error line naming the queries, not by the whole usage
// text before it (which scrolled the error away).
func TestAnUnknownHistoryQueryPrintsOnlyTheError(t *testing.T) {
	var out, errOut bytes.Buffer
	err := historyCmd(context.Background(), []string{"timeline"}, &out, &errOut, func(string) string { return "" })
	if err == nil || !strings.Contains(err.Error(), `unknown query "timeline"`) || !strings.Contains(err.Error(), "fleet history -h") {
		t.Errorf("error %v: want the unknown query named and fleet history -h for the usage", err)
	}
	if errOut.Len() > 0 || out.Len() > 0 {
		t.Errorf("an unknown query printed more than its error:\n%s%s", out.String(), errOut.String())
	}
}
