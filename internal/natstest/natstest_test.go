package natstest_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/internal/natstest"
)

func TestPublishStoredReturnsTheSequenceTheServerStoredAt(t *testing.T) {
	_, st := natstest.Provisioned(t)
	nc := st.JetStream().Conn()
	const subject = "fleet.report.d1.heartbeat"

	t.Run("an identical payload published again is told apart", func(t *testing.T) {
		first := natstest.PublishStored(t, nc, &nats.Msg{Subject: subject, Data: []byte("same")})
		second := natstest.PublishStored(t, nc, &nats.Msg{Subject: subject, Data: []byte("same")})
		if first == 0 || second != first+1 {
			t.Errorf("sequences %d then %d, want consecutive", first, second)
		}
	})
	t.Run("headers a publisher forged never give the sequence", func(t *testing.T) {
		seq := natstest.PublishStored(t, nc, &nats.Msg{Subject: subject, Data: []byte("forged"), Header: nats.Header{
			"Nats-Sequence": {"999"}, "Nats-Subject": {"fleet.report.d2.heartbeat"}, "Status": {"404"}}})
		if seq != 3 {
			t.Errorf("sequence %d, want 3", seq)
		}
	})
	t.Run("a flood across both report streams is confirmed by the last of each", func(t *testing.T) {
		var msgs []*nats.Msg
		for i := range 2000 {
			subj := fmt.Sprintf("fleet.report.f%d.workload", i%7)
			if i%2 == 1 {
				subj = fmt.Sprintf("fleet.report.f%d.inventory", i%7)
			}
			msgs = append(msgs, &nats.Msg{Subject: subj, Data: fmt.Appendf(nil, "%d", i)})
		}
		seq := natstest.PublishStored(t, nc, msgs...)
		if seq != 1000 { // the last message is the 1,000th inventory (heartbeats are in FLEET_LIVENESS)
			t.Errorf("the last message's sequence %d, want %d", seq, 1000)
		}
		reports, err := st.JetStream().Stream(t.Context(), "FLEET_REPORTS")
		if err != nil {
			t.Fatal(err)
		}
		if info, err := reports.Info(t.Context()); err != nil || info.State.Msgs != 1000 {
			t.Errorf("the reports stream holds %v messages (%v), want the flood's 1,000 workload reports", info, err)
		}
	})
}
