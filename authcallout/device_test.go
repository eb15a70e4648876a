package authcallout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestADeviceCanDoExactlyItsJob walks a device through everything it is
// allowed: publish each report kind (stored in the control plane's streams,
// never acknowledged), follow and direct-get its intent, receive its
// commands.
func TestADeviceCanDoExactlyItsJob(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := e.device(t, "dev-a", false)
	c, err := e.connect("dev-a", src, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Each report is stored: the control plane reads it back (a report
	// stream never acknowledges one).
	for _, k := range []events.ReportKind{events.ReportHeartbeat, events.ReportInventory, events.ReportWorkload, events.ReportTask, events.ReportCommand,
		events.ReportHealth, events.ReportContainers} {
		subj, _ := events.ReportSubject("dev-a", k)
		if seq := natstest.PublishStoredVia(t, c.Conn, e.admin, &nats.Msg{Subject: subj, Data: []byte(`{"kind":"` + string(k) + `"}`)}); seq == 0 {
			t.Fatalf("report on %s stored at sequence 0", subj)
		}
	}

	notifySubj, _ := events.IntentNotifySubject("dev-a")
	updates, err := c.SubscribeSync(notifySubj)
	if err != nil {
		t.Fatal(err)
	}
	cmdSubj, _ := events.CommandSubject("dev-a")
	cmds, err := c.SubscribeSync(cmdSubj)
	if err != nil {
		t.Fatal(err)
	}
	c.noViolation(t)

	if _, err := e.intent.Put(ctx, "dev-a", []byte(`{"want":1}`)); err != nil {
		t.Fatal(err)
	}
	m, err := updates.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("intent update: %v", err)
	}
	if diff := cmp.Diff(`{"want":1}`, string(m.Data)); diff != "" {
		t.Fatalf("intent update (-want +got):\n%s", diff)
	}

	dg, _ := events.IntentDirectGetSubject("dev-a")
	resp, err := c.Request(dg, nil, 10*time.Second)
	if err != nil {
		t.Fatalf("direct get: %v", err)
	}
	if diff := cmp.Diff(`{"want":1}`, string(resp.Data)); diff != "" {
		t.Fatalf("direct get (-want +got):\n%s", diff)
	}

	if err := e.admin.Publish(cmdSubj, []byte("restart")); err != nil {
		t.Fatal(err)
	}
	if m, err := cmds.NextMsg(10 * time.Second); err != nil || string(m.Data) != "restart" {
		t.Fatalf("command: %v %v", m, err)
	}
	c.noViolation(t)
}

// TestOnlyTheOperatorRoleIsAControlPlaneIdentity: a token with any other
// role (the fleet-shipper role of earlier builds, say) is looked up as a
// device, and a subject that is no device is refused.
func TestOnlyTheOperatorRoleIsAControlPlaneIdentity(t *testing.T) {
	e := newEnv(t, envOptions{})
	src := e.machine(t, "ci", "fleet-shipper")
	if c, err := e.connect(src.Subject(), src, ""); err == nil {
		c.Close()
		t.Fatal("a fleet-shipper token that is no device connected; only fleet-operator is a control-plane role")
	}
	if got := e.refusals.last(); !strings.Contains(got, authcallout.ErrUnknownIdentity.Error()) {
		t.Errorf("refusal %q, want %q", got, authcallout.ErrUnknownIdentity)
	}
}
