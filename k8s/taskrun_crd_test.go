package k8s_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func agentUpgrade(name string) *fleetv1.TaskRun {
	return &fleetv1.TaskRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: fleetv1.TaskRunSpec{
			Task:           fleetv1.TaskAgentUpgrade,
			Agent:          &fleetv1.AgentArtifact{URL: "https://downloads.example.com/fleet-agent-v2", SHA256: sha, Version: "v2.0.0"},
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
		},
	}
}

func systemUpgrade(name string) *fleetv1.TaskRun {
	return &fleetv1.TaskRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: fleetv1.TaskRunSpec{
			Task:           fleetv1.TaskSystemUpgrade,
			AllowedGroups:  []string{"lab"},
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
		},
	}
}

func TestValidTaskRunsAreAccepted(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name string
		tr   *fleetv1.TaskRun
	}{
		{"a system-upgrade with allowed groups is accepted", systemUpgrade("valid-system")},
		{"an agent-upgrade with its artifact is accepted", agentUpgrade("valid-agent")},
		{"an agent-upgrade from an http URL is accepted (the sha256 protects it)", func() *fleetv1.TaskRun {
			tr := agentUpgrade("valid-agent-http")
			tr.Spec.Agent.URL = "http://mirror.lan/fleet-agent"
			return tr
		}()},
		{"a maintenance window across midnight is accepted", func() *fleetv1.TaskRun {
			tr := systemUpgrade("valid-window")
			tr.Spec.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "23:30", Duration: "1h30m"}
			return tr
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Create(ctx, tc.tr); err != nil {
				t.Fatalf("refused: %v", err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), tc.tr) })
		})
	}
}

func TestInvalidTaskRunsAreRefusedNamingTheField(t *testing.T) {
	c := newClient(t)
	tests := []struct {
		name string
		tr   func() *fleetv1.TaskRun
		want []string
	}{
		{"an unknown task is refused", func() *fleetv1.TaskRun {
			tr := systemUpgrade("bad-task")
			tr.Spec.Task = "reboot"
			return tr
		}, []string{"spec.task", "reboot", "system-upgrade", "agent-upgrade"}},
		{"an agent-upgrade without its agent is refused", func() *fleetv1.TaskRun {
			tr := agentUpgrade("no-agent")
			tr.Spec.Agent = nil
			return tr
		}, []string{"agent is required when task is agent-upgrade"}},
		{"a system-upgrade with an agent is refused", func() *fleetv1.TaskRun {
			tr := systemUpgrade("extra-agent")
			tr.Spec.Agent = agentUpgrade("x").Spec.Agent
			return tr
		}, []string{"must be absent otherwise"}},
		{"an agent URL of another scheme is refused", func() *fleetv1.TaskRun {
			tr := agentUpgrade("file-url")
			tr.Spec.Agent.URL = "file:///tmp/agent"
			return tr
		}, []string{"agent.url must start with https:// or http://"}},
		{"a short sha256 is refused", func() *fleetv1.TaskRun {
			tr := agentUpgrade("short-sha")
			tr.Spec.Agent.SHA256 = "abc"
			return tr
		}, []string{"spec.agent.sha256", "should match"}},
		{"an uppercase sha256 is refused", func() *fleetv1.TaskRun {
			tr := agentUpgrade("upper-sha")
			tr.Spec.Agent.SHA256 = strings.ToUpper(sha)
			return tr
		}, []string{"spec.agent.sha256"}},
		{"an agent without a version is refused", func() *fleetv1.TaskRun {
			tr := agentUpgrade("no-version")
			tr.Spec.Agent.Version = ""
			return tr
		}, []string{"spec.agent.version"}},
		{"a maintenance window start that is not HH:MM is refused", func() *fleetv1.TaskRun {
			tr := systemUpgrade("bad-window-start")
			tr.Spec.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "2:00", Duration: "2h"}
			return tr
		}, []string{"spec.maintenanceWindow.start"}},
		{"a maintenance window longer than a day is refused", func() *fleetv1.TaskRun {
			tr := systemUpgrade("long-window")
			tr.Spec.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "25h"}
			return tr
		}, []string{"maintenanceWindow.duration must be hours and minutes from 1m to 24h"}},
		{"a maintenance window in seconds is refused", func() *fleetv1.TaskRun {
			tr := systemUpgrade("seconds-window")
			tr.Spec.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "30s"}
			return tr
		}, []string{"maintenanceWindow.duration must be hours and minutes from 1m to 24h"}},
		{"a name with a dot is refused", func() *fleetv1.TaskRun {
			return systemUpgrade("upgrade.now")
		}, []string{"metadata.name must be a DNS label"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tr := tc.tr()
			err := c.Create(ctx, tr)
			if err == nil {
				_ = c.Delete(ctx, tr)
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestATaskRunSpecCannotChange(t *testing.T) {
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := agentUpgrade("immutable")
	if err := c.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), tr) })
	tests := []struct {
		name   string
		change func(*fleetv1.TaskRun)
	}{
		{"a new selector is refused", func(tr *fleetv1.TaskRun) { tr.Spec.TargetSelector.MatchLabels = map[string]string{"role": "other"} }},
		{"a new agent version is refused", func(tr *fleetv1.TaskRun) { tr.Spec.Agent.Version = "v3.0.0" }},
		{"another task is refused", func(tr *fleetv1.TaskRun) { tr.Spec.Task, tr.Spec.Agent = fleetv1.TaskSystemUpgrade, nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got fleetv1.TaskRun
			if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "immutable"}, &got); err != nil {
				t.Fatal(err)
			}
			tc.change(&got)
			err := c.Update(ctx, &got)
			if err == nil {
				t.Fatal("the API server accepted the change")
			}
			if !strings.Contains(err.Error(), "spec is immutable: create a new TaskRun") {
				t.Errorf("error does not say to create a new TaskRun:\n%v", err)
			}
		})
	}
	t.Run("labels can still change", func(t *testing.T) {
		var got fleetv1.TaskRun
		if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "immutable"}, &got); err != nil {
			t.Fatal(err)
		}
		got.Labels = map[string]string{"team": "ops"}
		if err := c.Update(ctx, &got); err != nil {
			t.Errorf("a label change was refused: %v", err)
		}
	})
}
