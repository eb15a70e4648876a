package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// simulateServer is historyServer plus the devices' inventory (their
// labels: sim-1 a canary).
func simulateServer(t *testing.T) string {
	t.Helper()
	url, _ := historyServer(t)
	nc, err := nats.Connect(url, nats.UserInfo(historyUser, historyPassword))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	st, err := events.NewStore(nc, events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for dev, labels := range map[string]map[string]string{"sim-1": {"app": "api", "canary": "true"}, "sim-2": {"app": "api"}} {
		ev, err := events.New(events.Keys{Device: dev}, events.DeviceInventory{OS: "linux", Arch: "arm64", AgentVersion: "0.1.0", Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		natstest.Write(t, ctx, st, ev)
	}
	return url
}

const simulatedDeployment = `apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: api
  namespace: lab
spec:
  targetSelector:
    matchLabels:
      app: api
  rollout:
    batches:
      - count: 1
        soak: 10m
  score:
    type: PodmanV0
    data:
      services:
        - name: api
          image: registry.example.com/api:v2
`

func TestFleetRolloutSimulatePredictsAndChecksItself(t *testing.T) {
	url := simulateServer(t)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(manifest, []byte(simulatedDeployment), 0o600); err != nil {
		t.Fatal(err)
	}
	// A window that opens three hours from now (UTC, the simulator's zone
	// for every device) is closed when the simulated rollout starts, at
	// the last event, written a moment ago.
	opens := time.Now().UTC().Add(3 * time.Hour).Format("15:04")
	windowed := filepath.Join(dir, "windowed.yaml")
	if err := os.WriteFile(windowed, []byte(strings.Replace(simulatedDeployment, "  rollout:\n",
		"  rollout:\n    maintenanceWindow:\n      start: \""+opens+"\"\n      duration: 1m\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := []string{"--server", url, "--user", historyUser, "--password", historyPassword}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"a manifest's maintenance window makes its targets wait, read in UTC", append([]string{"simulate", "-f", windowed, "--seed", "7"}, creds...),
			[]string{"1 targets wait for the maintenance window (" + opens + " for 1m)", "assumes: the maintenance window (" + opens + " for 1m) is read in UTC", "ends Succeeded after 3h"}},
		{"a manifest's plan is predicted against the recorded behaviour", append([]string{"simulate", "-f", manifest, "--seed", "7"}, creds...),
			[]string{"Simulated rollout of lab/api (seed 7): 2 targets, 1 canaries", "ends Succeeded after 10m", "STAGES", "canary", "batch 1",
				"rollout.batch-soaking", "rollout.succeeded"}},
		{"the recorded rollouts are compared with their simulations", append([]string{"simulate", "--recorded", "lab/api"}, creds...),
			[]string{"Recorded rollouts of lab/api simulated with their own plans", "(end)", "Succeeded"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := rolloutCmd(context.Background(), tc.args, &out, &errOut); err != nil {
				t.Fatalf("%v\n%s", err, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
	t.Run("a maintenance window that does not parse is refused naming its field", func(t *testing.T) {
		bad := filepath.Join(dir, "bad-window.yaml")
		if err := os.WriteFile(bad, []byte(strings.Replace(simulatedDeployment, "  rollout:\n",
			"  rollout:\n    maintenanceWindow:\n      start: \"25:00\"\n      duration: 1h\n", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		err := rolloutCmd(context.Background(), append([]string{"simulate", "-f", bad}, creds...), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "spec.rollout.maintenanceWindow") {
			t.Fatalf("error %v; want one naming spec.rollout.maintenanceWindow", err)
		}
	})
	t.Run("a fetch window without prefetch is refused naming its field and the fix", func(t *testing.T) {
		bad := filepath.Join(dir, "fetch-window.yaml")
		if err := os.WriteFile(bad, []byte(strings.Replace(simulatedDeployment, "  rollout:\n",
			"  rollout:\n    fetchWindow:\n      start: \"02:00\"\n      duration: 1h\n", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		err := rolloutCmd(context.Background(), append([]string{"simulate", "-f", bad}, creds...), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "spec.rollout.fetchWindow needs spec.rollout.prefetch: true") {
			t.Fatalf("error %v; want one naming spec.rollout.fetchWindow and prefetch", err)
		}
	})
	t.Run("a manifest with prefetch says how its fetches ahead go", func(t *testing.T) {
		pre := filepath.Join(dir, "prefetch.yaml")
		if err := os.WriteFile(pre, []byte(strings.Replace(simulatedDeployment, "  rollout:\n",
			"  rollout:\n    prefetch: true\n", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := rolloutCmd(context.Background(), append([]string{"simulate", "-f", pre}, creds...), &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		if want := "prefetch: 0 targets fetched before they could switch, 0 still fetching then, 0 pulled while switching, 2 without a recorded fetch"; !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	})
	t.Run("json decodes into the prediction", func(t *testing.T) {
		var out bytes.Buffer
		if err := rolloutCmd(context.Background(), append([]string{"simulate", "-f", manifest, "-o", "json"}, creds...), &out, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		var p history.Prediction
		if err := json.Unmarshal(out.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		if p.End != "Succeeded" || p.Handed != 2 || p.Model.Own != 2 {
			t.Errorf("prediction %+v", p)
		}
	})
}

func TestFleetRolloutSimulateRefusesBadInputNamingTheFix(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", simulatedDeployment)
	creds := []string{"--server", "nats://127.0.0.1:1", "--user", historyUser, "--password", historyPassword}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"neither a manifest nor a recorded Deployment", creds, "give exactly one of -f"},
		{"both a manifest and a recorded Deployment", append([]string{"-f", good, "--recorded", "lab/api"}, creds...), "give exactly one of -f"},
		{"an approval delay that is no duration", append([]string{"-f", good, "--approval-delay", "soon"}, creds...), "--approval-delay"},
		{"a bad --from names the format", append([]string{"-f", good, "--from", "monday"}, creds...), "--from"},
		{"a field the manifest does not have is named", append([]string{"-f", write("typo.yaml", strings.Replace(simulatedDeployment, "soak:", "soakk:", 1))}, creds...), "soakk"},
		{"another kind is refused", append([]string{"-f", write("kind.yaml", strings.Replace(simulatedDeployment, "kind: Deployment", "kind: TaskRun", 1))}, creds...), "kind"},
		{"a recorded Deployment without a namespace", append([]string{"--recorded", "api"}, creds...), "<namespace>/<name>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := rolloutCmd(context.Background(), append([]string{"simulate"}, tc.args...), &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error()+errOut.String(), historyPassword) {
				t.Error("the password was printed")
			}
		})
	}
}
