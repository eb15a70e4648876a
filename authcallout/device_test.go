package authcallout_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
)

// TestADeviceCanDoExactlyItsJob walks a device through everything it is
// allowed: JetStream-publish each report kind (the ack comes back on its
// inbox), follow and direct-get its intent, receive its commands.
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

	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []events.ReportKind{events.ReportHeartbeat, events.ReportInventory, events.ReportWorkload, events.ReportTask, events.ReportCommand} {
		subj, _ := events.ReportSubject("dev-a", k)
		ack, err := js.Publish(ctx, subj, []byte(`{}`))
		if err != nil {
			t.Fatalf("JetStream publish %s: %v", subj, err)
		}
		if ack.Stream == "" {
			t.Fatalf("publish %s: ack without stream", subj)
		}
	}

	kvSubj, _ := events.IntentKVSubject("dev-a")
	updates, err := c.SubscribeSync(kvSubj)
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

func TestTheShipperRoleReadsRolloutsAndWritesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src := e.machine(t, "ci", "fleet-shipper")
	c, err := e.connect(src.Subject(), src, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := events.DeploymentRolloutSubject("ns", "web")
	if _, err := e.js.Publish(ctx, subj, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamRollout, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	if err != nil {
		t.Fatalf("read rollout: %v", err)
	}
	if m.Subject() != subj {
		t.Fatalf("subject %s, want %s", m.Subject(), subj)
	}
	report, _ := events.ReportSubject("dev-a", events.ReportHeartbeat)
	if err := c.Publish(report, nil); err != nil {
		t.Fatal(err)
	}
	c.waitViolation(t, report)
	_ = nats.ErrPermissionViolation
}
