package events_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

func TestSubjectBuilders(t *testing.T) {
	must := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"a deployment's intent subject has the deployment kind token", must(events.DeploymentIntentSubject("lab", "analysis-api")), "fleet.intent.deployment.lab.analysis-api"},
		{"a taskrun's intent subject has the taskrun kind token", must(events.TaskRunIntentSubject("lab", "upgrade-1")), "fleet.intent.taskrun.lab.upgrade-1"},
		{"a deployment's rollout subject", must(events.DeploymentRolloutSubject("lab", "analysis-api")), "fleet.rollout.deployment.lab.analysis-api"},
		{"a device's heartbeat subject", must(events.ReportSubject("dev-01", events.ReportHeartbeat)), "fleet.report.dev-01.heartbeat"},
		{"a device's workload report subject", must(events.ReportSubject("dev-01", events.ReportWorkload)), "fleet.report.dev-01.workload"},
		{"a device's command subject", must(events.CommandSubject("dev-01")), "fleet.command.dev-01"},
		{"a device's dashboard actions subject has the device kind token", must(events.DashboardDeviceSubject("dev-01")), "fleet.dashboard.device.dev-01"},
		{"an alert's acknowledgements subject has the alert kind token", must(events.DashboardAlertSubject("a0123")), "fleet.dashboard.alert.a0123"},
		{"a device's reports filter", must(events.DeviceReportsFilter("dev-01")), "fleet.report.dev-01.>"},
		{"a device's intent key is its id", must(events.IntentKey("dev-01")), "dev-01"},
		{"a device's intent KV subject", must(events.IntentKVSubject("dev-01")), "$KV.fleet-intent.dev-01"},
		{"a device's subject-scoped direct get", must(events.IntentDirectGetSubject("dev-01")), "$JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent.dev-01"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}

func TestParseSubject(t *testing.T) {
	tests := []struct {
		name    string
		subject string
		want    events.Ref
		wantErr error
	}{
		{"a deployment intent subject parses to its namespace and name", "fleet.intent.deployment.lab.api",
			events.Ref{Family: events.FamilyDeploymentIntent, Keys: events.Keys{Namespace: "lab", Name: "api"}}, nil},
		{"a taskrun intent subject parses", "fleet.intent.taskrun.lab.up",
			events.Ref{Family: events.FamilyTaskRunIntent, Keys: events.Keys{Namespace: "lab", Name: "up"}}, nil},
		{"a rollout subject parses", "fleet.rollout.deployment.lab.api",
			events.Ref{Family: events.FamilyDeploymentRollout, Keys: events.Keys{Namespace: "lab", Name: "api"}}, nil},
		{"a report subject parses to its device and kind", "fleet.report.dev-1.task",
			events.Ref{Family: events.FamilyReport, Keys: events.Keys{Device: "dev-1"}, Report: events.ReportTask}, nil},
		{"a command subject parses", "fleet.command.dev-1",
			events.Ref{Family: events.FamilyCommand, Keys: events.Keys{Device: "dev-1"}}, nil},
		{"a dashboard device subject parses to its device", "fleet.dashboard.device.dev-1",
			events.Ref{Family: events.FamilyDashboardDevice, Keys: events.Keys{Device: "dev-1"}}, nil},
		{"a dashboard alert subject parses to its key as the name", "fleet.dashboard.alert.a01",
			events.Ref{Family: events.FamilyDashboardAlert, Keys: events.Keys{Name: "a01"}}, nil},
		{"a dashboard subject with an unknown kind is rejected", "fleet.dashboard.pod.x", events.Ref{}, events.ErrInvalidSubject},
		{"a subject outside fleet is rejected", "foo.bar.baz", events.Ref{}, events.ErrInvalidSubject},
		{"an intent subject with an extra token is rejected", "fleet.intent.deployment.lab.api.x", events.Ref{}, events.ErrInvalidSubject},
		{"an intent subject with an unknown kind is rejected", "fleet.intent.pod.lab.api", events.Ref{}, events.ErrInvalidSubject},
		{"a rollout subject for taskruns is rejected", "fleet.rollout.taskrun.lab.api", events.Ref{}, events.ErrInvalidSubject},
		{"a report subject with an unknown kind is rejected", "fleet.report.dev-1.selfie", events.Ref{}, events.ErrInvalidSubject},
		{"a wildcard in a token is rejected", "fleet.report.*.heartbeat", events.Ref{}, events.ErrInvalidToken},
		{"an empty token is rejected", "fleet.intent.deployment..api", events.Ref{}, events.ErrInvalidToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.ParseSubject(tc.subject)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ParseSubject(%q) error = %v, want %v", tc.subject, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseSubject(%q) (-want +got):\n%s", tc.subject, diff)
			}
			back, err := got.Subject()
			if err != nil || back != tc.subject {
				t.Errorf("round trip gave %q, %v", back, err)
			}
		})
	}
}

func TestFamiliesCannotCollide(t *testing.T) {
	// Whatever the namespace and name, a deployment subject and a taskrun
	// subject differ in their fixed kind token, and report subjects have a
	// different token count from intent subjects.
	names := []string{"deployment", "taskrun", "intent", "report", "fleet", "x"}
	seen := map[string]string{}
	for _, ns := range names {
		for _, n := range names {
			for fam, build := range map[string]func(string, string) (string, error){
				"deployment-intent":  events.DeploymentIntentSubject,
				"taskrun-intent":     events.TaskRunIntentSubject,
				"deployment-rollout": events.DeploymentRolloutSubject,
			} {
				s, err := build(ns, n)
				if err != nil {
					t.Fatal(err)
				}
				if prev, ok := seen[s]; ok && prev != fam {
					t.Fatalf("%s and %s both build %q", prev, fam, s)
				}
				seen[s] = fam
			}
			s, _ := events.ReportSubject(ns, events.ReportKind("heartbeat"))
			if _, ok := seen[s]; ok {
				t.Fatalf("report subject %q collides", s)
			}
		}
	}
}

func TestStreamOf(t *testing.T) {
	tests := []struct {
		name    string
		filter  string
		want    string
		wantErr bool
	}{
		{"deployment intent lives in the intent stream", "fleet.intent.deployment.lab.api", events.StreamIntent, false},
		{"all intent of a namespace lives in the intent stream", "fleet.intent.*.lab.*", events.StreamIntent, false},
		{"rollout transitions live in the rollout stream", "fleet.rollout.deployment.lab.api", events.StreamRollout, false},
		{"heartbeats live in the liveness stream", "fleet.report.*.heartbeat", events.StreamLiveness, false},
		{"inventories live in the telemetry stream", "fleet.report.*.inventory", events.StreamTelemetry, false},
		{"inventory lives in the telemetry stream", "fleet.report.dev-1.inventory", events.StreamTelemetry, false},
		{"workload status lives in the reports stream", "fleet.report.*.workload", events.StreamReports, false},
		{"commands live in the commands stream", "fleet.command.dev-1", events.StreamCommands, false},
		{"a filter over every report kind spans two streams and is refused", "fleet.report.dev-1.>", "", true},
		{"a filter over everything is refused", ">", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.StreamOf(tc.filter)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("StreamOf(%q) = %q, %v; want %q, error %v", tc.filter, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseIntentKVSubject(t *testing.T) {
	tests := []struct {
		name    string
		subject string
		want    string
		wantErr error
	}{
		{"a device's KV subject gives the device", "$KV.fleet-intent.rpi-042", "rpi-042", nil},
		{"another bucket's subject is refused", "$KV.fleet-identity.rpi-042", "", events.ErrInvalidSubject},
		{"a wildcard device is refused", "$KV.fleet-intent.*", "", events.ErrInvalidToken},
		{"a nested key is refused", "$KV.fleet-intent.a.b", "", events.ErrInvalidToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.ParseIntentKVSubject(tc.subject)
			if !errors.Is(err, tc.wantErr) || got != tc.want {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
