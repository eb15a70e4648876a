package presence_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/internal/natscluster"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/operator/devices/presence"
)

// clusterConfig is a 3-server cluster's accounts: devices as static users
// of DEVICES (the server sets the events' user from them as it does from
// the callout's user JWT: identity is TestAClientNameNamesNoDevice's), and
// the documented fleet-presence user.
const clusterConfig = `accounts {
  DEVICES { users: [ { user: "dev-a", password: "a" }, { user: "dev-b", password: "b" } ] }
  SYS { users: [ { user: "fleet-presence", password: "p",
    permissions: {
      publish: { allow: ["$SYS.REQ.ACCOUNT.DEVICES.CONNZ"] }
      subscribe: { allow: ["$SYS.ACCOUNT.DEVICES.CONNECT", "$SYS.ACCOUNT.DEVICES.DISCONNECT",
        "$SYS.SERVER.*.SHUTDOWN", "_INBOX_fleet-presence.>"] }
    } } ] }
}
system_account: SYS
`

// TestServerRestartsOfACluster: on 3 servers, a device is connected while
// one of its connections is up, whichever server holds it; a server that
// crashes (no event) or stops, and a restart of the whole cluster, end
// with the tracker holding exactly the connections the servers hold.
func TestServerRestartsOfACluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := natscluster.Start(ctx, natscluster.Options{N: 3, Dir: t.TempDir(), Config: clusterConfig, SyncInterval: "2m"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	nc, err := nats.Connect(c.URL(), nats.UserInfo("fleet-presence", "p"), nats.CustomInboxPrefix("_INBOX_fleet-presence"),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tr, err := presence.New(presence.Options{Conn: nc, Account: "DEVICES", Resync: 300 * time.Millisecond, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- tr.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	// device connects to server i first (then the others).
	device := func(name, password string, i int) *nats.Conn {
		t.Helper()
		urls := append([]string{c.ClientURL(i)}, c.ClientURLs()...)
		d, err := nats.Connect(urls[0], nats.UserInfo(name, password), nats.DontRandomize(), nats.MaxReconnects(-1),
			nats.ReconnectWait(100*time.Millisecond), func(o *nats.Options) error { o.Servers = urls; return nil })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	}
	is := func(what, dev string, want bool) {
		t.Helper()
		testenv.Eventually(t, what, 2*time.Minute, func() bool { return connected(tr, dev) == want })
	}

	a := device("dev-a", "a", 1)
	b := device("dev-b", "b", 2)
	is("dev-a connected on server 1", "dev-a", true)
	is("dev-b connected on server 2", "dev-b", true)
	// Two connections of dev-a on two servers: one going keeps it.
	a2 := device("dev-a", "a", 0)
	// Events of different servers come in no set order: the second
	// connection is known before the first goes.
	testenv.Eventually(t, "dev-a's second connection known", 2*time.Minute, func() bool { return tr.Conns("dev-a") == 2 })
	a.Close()
	// dev-b's disconnect comes after dev-a's from server 1 on the same
	// route: once the tracker saw it, it saw dev-a's.
	b.Close()
	is("dev-b gone", "dev-b", false)
	if !connected(tr, "dev-a") {
		t.Fatal("dev-a's connection on server 0 is up, but the tracker has it gone")
	}

	// Server 2 crashes (no disconnect, no shutdown event): dev-b, back on
	// it, reconnects elsewhere; once dev-b closes, nothing keeps it.
	b = device("dev-b", "b", 2)
	is("dev-b connected again", "dev-b", true)
	if err := c.Kill(2); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "dev-b reconnected", 2*time.Minute, func() bool { return b.IsConnected() && b.ConnectedUrl() != c.ClientURL(2) })
	b.Close()
	is("dev-b gone with the crashed server's connection", "dev-b", false)

	// The whole cluster restarts: the tracker's and dev-a's connections
	// come back; dev-a is connected, and gone once it closes.
	for i := range 3 {
		if c.Running(i) {
			if err := c.Stop(i); err != nil {
				t.Fatal(err)
			}
		}
	}
	// All at once: one alone is never healthy without a quorum.
	restarted := make(chan error, 3)
	for i := range 3 {
		go func() { restarted <- c.Restart(ctx, i) }()
	}
	for range 3 {
		if err := <-restarted; err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, "dev-a reconnected", 2*time.Minute, a2.IsConnected)
	is("dev-a connected after the cluster restart", "dev-a", true)
	a2.Close()
	is("dev-a gone", "dev-a", false)
}
