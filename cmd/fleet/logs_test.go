package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// TestFleetLogsReadsAsTheCallerAndAuditsEveryAttempt: a user bound to get
// devices/log reads a stand-in device's answer, printed with its escapes
// shown; a user without the binding is refused, the device is never
// asked, and both attempts are in FLEET_AUDIT.
func TestFleetLogsReadsAsTheCallerAndAuditsEveryAttempt(t *testing.T) {
	srv, err := kubeapi.Start(kubeapi.Options{})
	if errors.Is(err, kubeapi.ErrBinariesMissing) {
		testenv.Missing(t, "kube-apiserver and etcd", kubeapi.SetupCommand, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	admin, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lab"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "device-log-reader", Namespace: "lab"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"fleet.nationtech.io"}, Resources: []string{"devices/log"}, Verbs: []string{"get"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "device-log-reader", Namespace: "lab"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "device-log-reader"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "ada"}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ada, grace := kubeconfigAs(t, srv, "ada"), kubeconfigAs(t, srv, "grace")

	ns, st := natstest.Provisioned(t)
	dev := natstest.Connect(t, ns)
	asked := make(chan events.LogsRequest, 4)
	cmdSubj, _ := events.CommandSubject("podman-1")
	if _, err := dev.Subscribe(cmdSubj, func(m *nats.Msg) {
		ev, err := events.DecodeStored(m.Subject, m.Data)
		if err != nil {
			return
		}
		cmd, err := events.Decode[events.AgentCommand](ev)
		if err == nil && cmd.Command == events.CommandDiagnose && cmd.Logs != nil {
			subj, _ := events.LogsSubject("podman-1", cmd.Logs.Reader, cmd.Logs.Request)
			b, _ := json.Marshal(events.LogsChunk{Seq: 1, Sent: time.Now(), End: true, Diagnosis: &events.DeviceDiagnosis{
				AgentVersion: "0.9.0", Engine: "podman 4.3.1", DiskFree: 3 << 30, DiskTotal: 10 << 30, MemAvailable: 512 << 20, MemTotal: 2 << 30,
				Containers: events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "analysis-api", Generation: 2,
					Containers: []events.ContainerState{{Name: "web\x1b[2J", Role: "service", State: "running", Restarts: 3, ExitCode: 137,
						Signal: "SIGKILL", Health: "healthy", ImageDigest: "sha256:abc"}}}}},
				Ports:     map[string][]string{"lab/analysis-api/web\x1b[2J": {"8080:8080/tcp"}},
				Passes:    []events.PassRecord{{At: time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC), Seconds: 0.25, Result: "converged"}},
				Workloads: []events.WorkloadStatus{{Namespace: "lab", Deployment: "analysis-api", Generation: 2, Phase: events.WorkloadConverged}},
			}})
			_ = dev.Publish(subj, b)
			return
		}
		if err != nil || cmd.Command != events.CommandLogs || cmd.Logs == nil {
			return
		}
		asked <- *cmd.Logs
		subj, _ := events.LogsSubject("podman-1", cmd.Logs.Reader, cmd.Logs.Request)
		at := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
		b, _ := json.Marshal(events.LogsChunk{Seq: 1, Sent: time.Now(), End: true, Lines: []events.LogLine{
			{Time: at, Text: "GET /api/analysis 200"}, {Time: at, Text: "login with *** refused"}, {Time: at, Text: "\x1b[2Jgone\rFAKE"}}})
		_ = dev.Publish(subj, b)
	}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Flush(); err != nil {
		t.Fatal(err)
	}
	fleet := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		env := map[string]string{"NATS_URL": ns.ClientURL()}
		err := logsCmd(ctx, args, &out, &errOut, func(k string) string { return env[k] })
		return out.String(), errOut.String(), err
	}

	t.Run("a user without the permission is refused and the device never asked", func(t *testing.T) {
		_, _, err := fleet("lab/podman-1", "analysis-api/web", "--kubeconfig", grace)
		if err == nil || !strings.Contains(err.Error(), "grace may not get devices/log") {
			t.Fatalf("fleet logs as grace = %v, want a refusal naming the permission", err)
		}
		select {
		case lr := <-asked:
			t.Fatalf("the device was asked for %+v", lr)
		default:
		}
	})
	t.Run("a user with the permission reads the lines, escapes shown", func(t *testing.T) {
		var out string
		// RBAC sees a new binding shortly after it is created.
		testenv.EventuallyErr(t, "ada reads the logs", time.Minute, func() error {
			var err error
			out, _, err = fleet("lab/podman-1", "analysis-api/web", "--tail", "50", "--kubeconfig", ada)
			return err
		})
		want := "2026-12-05T06:00:00Z GET /api/analysis 200\n2026-12-05T06:00:00Z login with *** refused\n" +
			`2026-12-05T06:00:00Z \x1b[2Jgone\x0dFAKE` + "\n"
		if diff := cmp.Diff(want, out); diff != "" {
			t.Fatalf("output (-want +got):\n%s", diff)
		}
		lr := <-asked
		if lr.Namespace != "lab" || lr.Deployment != "analysis-api" || lr.Service != "web" || lr.Tail != 50 {
			t.Fatalf("the device was asked %+v", lr)
		}
	})
	t.Run("both attempts are audited with who, which device and which service", func(t *testing.T) {
		subj, _ := events.DashboardDeviceSubject("podman-1")
		var got []events.DeviceLogsRequested
		for rec, err := range st.Replay(ctx, subj, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			d, err := events.Decode[events.DeviceLogsRequested](rec.Event)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d)
		}
		if len(got) < 2 {
			t.Fatalf("audit records %+v, want grace's refusal and ada's read", got)
		}
		first, last := got[0], got[len(got)-1]
		want := []events.DeviceLogsRequested{
			{Namespace: "lab", Deployment: "analysis-api", Service: "web", User: "grace", Via: events.ViaCLI, Allowed: false},
			{Namespace: "lab", Deployment: "analysis-api", Service: "web", User: "ada", Via: events.ViaCLI, Tail: 50, Allowed: true},
		}
		if diff := cmp.Diff(want, []events.DeviceLogsRequested{first, last}, cmpopts.IgnoreFields(events.DeviceLogsRequested{}, "Request", "Reason")); diff != "" {
			t.Fatalf("audit (-want +got):\n%s", diff)
		}
		if !strings.Contains(first.Reason, "may not get devices/log") {
			t.Errorf("refusal reason %q does not name the permission", first.Reason)
		}
	})
	t.Run("fleet diagnose prints the device's answer, escapes shown", func(t *testing.T) {
		var out bytes.Buffer
		env := map[string]string{"NATS_URL": ns.ClientURL()}
		if err := describeCmd(ctx, []string{"lab/podman-1", "--kubeconfig", ada}, &out, io.Discard, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"agent 0.9.0, engine podman 4.3.1", "disk 3.0 GiB free of 10.0 GiB, memory 512 MiB available of 2.0 GiB",
			`web\x1b[2J`, "137 (SIGKILL)", "healthy", "sha256:abc", "8080:8080/tcp", "2026-12-05T06:00:00Z  converged", "lab/analysis-api generation 2: Converged"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q:\n%s", want, out.String())
			}
		}
		if strings.Contains(out.String(), "\x1b") {
			t.Errorf("output holds a raw escape:\n%q", out.String())
		}
	})
	t.Run("bad arguments are refused naming the form", func(t *testing.T) {
		for _, args := range [][]string{{"podman-1", "analysis-api/web"}, {"lab/podman-1", "web"}, {"lab/podman-1"}, {"lab/podman-1", "a/b", "--tail", "-1"}} {
			_, _, err := fleet(args...)
			if err == nil || !strings.Contains(err.Error(), "logs:") {
				t.Errorf("fleet logs %v = %v, want a usage error", args, err)
			}
		}
	})
}
