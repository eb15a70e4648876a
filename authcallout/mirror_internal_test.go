package authcallout

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestTheIdentityMirrorIsDroppedWheneverItMayHaveMissedAChange: the mirror
// answers only while its subscription has provably seen every change; a
// reconnect of the watch connection or a dropped message empties it, and
// a direct get that started before that is not stored.
func TestTheIdentityMirrorIsDroppedWheneverItMayHaveMissedAChange(t *testing.T) {
	ns := natstest.StartWith(t, natsembed.Options{Port: -1, Sync: natsembed.FastSync})
	held := mirrored{entry: events.IdentityEntry{Device: "dev-a"}}
	setup := func(t *testing.T) (*nats.Conn, *nats.Subscription, *mirror) {
		nc := natstest.Connect(t, ns, nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
		sub, err := nc.SubscribeSync("$KV.fleet-identity.>")
		if err != nil {
			t.Fatal(err)
		}
		m := &mirror{}
		if _, ok, ep := m.lookup(nc, sub, "sub-a"); ok {
			t.Fatal("an empty mirror holds sub-a")
		} else {
			m.fill(nc, sub, "sub-a", held, ep)
		}
		if e, ok, _ := m.lookup(nc, sub, "sub-a"); !ok || e != held {
			t.Fatalf("after a fill: %+v, %v", e, ok)
		}
		return nc, sub, m
	}
	t.Run("a reconnect empties it and refuses a fill from before", func(t *testing.T) {
		nc, sub, m := setup(t)
		_, _, before := m.lookup(nc, sub, "sub-b")
		cid, err := nc.GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.NATS().DisconnectClientByID(cid); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the watch connection reconnected", 30*time.Second, func() bool {
			return nc.Stats().Reconnects > 0 && nc.IsConnected()
		})
		if e, ok, _ := m.lookup(nc, sub, "sub-a"); ok {
			t.Fatalf("after a reconnect the mirror still holds %+v", e)
		}
		m.fill(nc, sub, "sub-b", held, before)
		if _, ok, _ := m.lookup(nc, sub, "sub-b"); ok {
			t.Fatal("a direct get started before the reconnect was stored")
		}
	})
	t.Run("a dropped message empties it", func(t *testing.T) {
		nc, sub, m := setup(t)
		if err := sub.SetPendingLimits(1, 1<<20); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := nc.Publish("$KV.fleet-identity.sub-x", []byte(`{"device":"x"}`)); err != nil {
				t.Fatal(err)
			}
		}
		testenv.Eventually(t, "the subscription dropped a message", 30*time.Second, func() bool {
			_ = nc.Flush()
			n, _ := sub.Dropped()
			return n > 0
		})
		if e, ok, _ := m.lookup(nc, sub, "sub-a"); ok {
			t.Fatalf("after a dropped message the mirror still holds %+v", e)
		}
	})
	t.Run("it is not used while disconnected", func(t *testing.T) {
		nc, sub, m := setup(t)
		nc.Close()
		if e, ok, _ := m.lookup(nc, sub, "sub-a"); ok {
			t.Fatalf("a closed connection's mirror answered %+v", e)
		}
	})
}
