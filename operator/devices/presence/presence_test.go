package presence_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/operator/devices/presence"
)

const wait = time.Minute

// chain is the auth chain with enrolled devices' keys.
type chain struct {
	env  *callouttest.Env
	keys map[string]*credential.KeyFile
}

func startChain(t *testing.T, devices ...string) *chain {
	t.Helper()
	return startChainWith(t, callouttest.Options{}, devices...)
}

func startChainWith(t *testing.T, o callouttest.Options, devices ...string) *chain {
	t.Helper()
	c := &chain{env: callouttest.StartWith(t, o), keys: map[string]*credential.KeyFile{}}
	for _, d := range devices {
		k, err := credential.ReadKeyFile(c.env.EnrollDevice(t, d))
		if err != nil {
			t.Fatal(err)
		}
		c.keys[d] = &k
	}
	return c
}

// connect connects device through the callout as the agent does, with
// opts after the agent's own (a device may choose its client name).
func (c *chain) connect(t *testing.T, device string, opts ...nats.Option) *agent.DeviceConn {
	t.Helper()
	dc, err := agent.Connect(context.Background(), agent.ConnectOptions{URL: c.env.NATS.ClientURL(), Key: c.keys[device], Device: device,
		NATSOptions: opts})
	if err != nil {
		t.Fatalf("connect %s: %v", device, err)
	}
	t.Cleanup(dc.Close)
	return dc
}

// track starts a tracker on the fleet-presence user, stopped when the
// test ends.
func (c *chain) track(t *testing.T) *presence.Tracker {
	t.Helper()
	return c.trackEvery(t, 0)
}

// trackEvery is track with a resync interval (0: the default).
func (c *chain) trackEvery(t *testing.T, resync time.Duration) *presence.Tracker {
	t.Helper()
	return c.trackWith(t, presence.Options{Resync: resync})
}

// trackWith is track with o's Resync and StaleSilence.
func (c *chain) trackWith(t *testing.T, o presence.Options) *presence.Tracker {
	t.Helper()
	nc, err := nats.Connect(c.env.NATS.ClientURL(), nats.UserInfo(authcallout.PresenceUser, os.Getenv("FLEET_PRESENCE_PASSWORD")),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(authcallout.PresenceUser)), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	tr, err := presence.New(presence.Options{Conn: nc, Account: "DEVICES", PageSize: 2, Resync: o.Resync, StaleSilence: o.StaleSilence})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	var stopped error
	t.Cleanup(func() {
		cancel()
		if stopped == nil {
			stopped = <-done
		}
		if stopped != nil {
			t.Error(stopped)
		}
	})
	testenv.EventuallyErr(t, "the first reconciliation", wait, func() error {
		select {
		case <-tr.Synced():
			return nil
		case stopped = <-done:
			t.Fatalf("the tracker stopped: %v", stopped)
		default:
		}
		return errors.New("not yet")
	})
	return tr
}

func connected(tr *presence.Tracker, device string) bool {
	up, _ := tr.Connected(device)
	return up
}

// settle waits until the tracker applied every event the server sent
// before now: a probe device connects and disconnects, and a server sends
// its events in order.
func (c *chain) settle(t *testing.T, tr *presence.Tracker) {
	t.Helper()
	dc := c.connect(t, "probe")
	testenv.Eventually(t, "the probe connected", wait, func() bool { return connected(tr, "probe") })
	dc.Close()
	testenv.Eventually(t, "the probe gone", wait, func() bool { return !connected(tr, "probe") })
}

// TestAClientNameNamesNoDevice is the attack: a device connects with
// another device's id as its CONNECT name. Only the user the server set
// from the callout's user JWT names a device.
func TestAClientNameNamesNoDevice(t *testing.T) {
	c := startChain(t, "dev-a", "dev-b", "probe")
	tr := c.track(t)
	c.connect(t, "dev-b", nats.Name("dev-a"))
	testenv.Eventually(t, "dev-b connected", wait, func() bool { return connected(tr, "dev-b") })
	c.settle(t, tr)
	if connected(tr, "dev-a") {
		t.Fatal("dev-b's connection named dev-a by its client name made dev-a connected")
	}
	a := c.connect(t, "dev-a")
	testenv.Eventually(t, "dev-a connected", wait, func() bool { return connected(tr, "dev-a") })
	a.Close()
	testenv.Eventually(t, "dev-a gone while dev-b, named dev-a, is still connected", wait, func() bool { return !connected(tr, "dev-a") })
	if !connected(tr, "dev-b") {
		t.Fatal("dev-b is not connected any more")
	}
}

// TestConnectionsOfOneDevice: a device is connected while one of its
// connections is up, whatever the order of the events.
func TestConnectionsOfOneDevice(t *testing.T) {
	c := startChain(t, "dev-a", "probe")
	tr := c.track(t)
	old := c.connect(t, "dev-a")
	testenv.Eventually(t, "dev-a connected", wait, func() bool { return connected(tr, "dev-a") })
	_, since := tr.Connected("dev-a")
	c.connect(t, "dev-a") // the reconnect overlapping the old connection
	old.Close()
	c.settle(t, tr)
	up, now := tr.Connected("dev-a")
	if !up {
		t.Fatal("the old connection's disconnect after the new connect turned dev-a not connected")
	}
	if !now.Equal(since) {
		t.Errorf("connected since %s, want %s (the first connection's)", now, since)
	}
}

// TestRestartRelearnsConnections: a tracker started after the devices
// connected (an operator restart, a leader failover, the events of a gap
// lost) learns them from the servers' connection lists, page by page.
func TestRestartRelearnsConnections(t *testing.T) {
	devices := []string{"dev-a", "dev-b", "dev-c", "dev-d", "dev-e"}
	c := startChain(t, append(devices, "probe")...)
	for _, d := range devices {
		c.connect(t, d, nats.Name("not-"+d))
	}
	tr := c.track(t) // pages of 2 connections
	for _, d := range devices {
		if !connected(tr, d) {
			t.Errorf("%s not connected after the first reconciliation", d)
		}
	}
	if n := tr.Count(); n != len(devices) {
		t.Errorf("%d devices connected, want %d", n, len(devices))
	}
}

// TestAReconciliationForgetsWhatTheEventsMissed: a disconnect lost in a
// gap (a connection the servers no longer list) and the connections of a
// server that crashed (it answers no reconciliation) are forgotten by the
// periodic reconciliation; a device still connected stays.
func TestAReconciliationForgetsWhatTheEventsMissed(t *testing.T) {
	c := startChain(t, "dev-a")
	tr := c.trackEvery(t, 200*time.Millisecond)
	c.connect(t, "dev-a")
	testenv.Eventually(t, "dev-a connected", wait, func() bool { return connected(tr, "dev-a") })
	tr.Inject(c.env.NATS.NATS().ID(), 1<<40, "lost-disconnect")
	tr.Inject("NCRASHEDSERVER", 1, "crashed-server")
	for _, d := range []string{"lost-disconnect", "crashed-server"} {
		if !connected(tr, d) {
			t.Fatalf("%s not recorded", d)
		}
	}
	testenv.Eventually(t, "the lost disconnect forgotten", wait, func() bool { return !connected(tr, "lost-disconnect") })
	testenv.Eventually(t, "the crashed server's connection forgotten", wait, func() bool { return !connected(tr, "crashed-server") })
	if !connected(tr, "dev-a") {
		t.Fatal("dev-a, still connected, was forgotten")
	}
}

// TestTheEventsCarryNoCredential: what fleet-presence receives of a
// device's connection (the connect and disconnect events, the connection
// list) holds neither the device's id_token nor a JWT: nothing the
// operator could log or keep is a credential.
func TestTheEventsCarryNoCredential(t *testing.T) {
	c := startChain(t, "dev-a")
	nc, err := nats.Connect(c.env.NATS.ClientURL(), nats.UserInfo(authcallout.PresenceUser, os.Getenv("FLEET_PRESENCE_PASSWORD")),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(authcallout.PresenceUser)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	events := make(chan *nats.Msg, 16)
	for _, subj := range []string{"$SYS.ACCOUNT.DEVICES.CONNECT", "$SYS.ACCOUNT.DEVICES.DISCONNECT"} {
		if _, err := nc.ChanSubscribe(subj, events); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	dc := c.connect(t, "dev-a")
	connz, err := nc.Request("$SYS.REQ.ACCOUNT.DEVICES.CONNZ", []byte(`{"auth":true}`), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	dc.Close()
	var bodies [][]byte
	bodies = append(bodies, connz.Data)
	for range 2 {
		select {
		case m := <-events:
			bodies = append(bodies, m.Data)
		case <-time.After(time.Minute):
			t.Fatalf("connect and disconnect events: %d of 2", len(bodies)-1)
		}
	}
	for _, b := range bodies {
		// A JWT (the id_token, the user JWT) starts with the base64 of
		// `{"`: eyJ.
		if strings.Contains(string(b), "eyJ") {
			t.Errorf("fleet-presence received a JWT: %s", b)
		}
		if !strings.Contains(string(b), `"dev-a"`) {
			t.Errorf("no dev-a in %s", b)
		}
	}
}

// freezer dials connections that stop on freeze: reads and writes block
// as a dead device's would (nothing is read, nothing answered), until
// release; then they fail.
type freezer struct {
	frozen   chan struct{}
	once     sync.Once
	ended    chan struct{}
	released sync.Once
}

func newFreezer() *freezer {
	return &freezer{frozen: make(chan struct{}), ended: make(chan struct{})}
}

func (f *freezer) freeze() { f.once.Do(func() { close(f.frozen) }) }

func (f *freezer) release() { f.released.Do(func() { close(f.ended) }) }

// Dial implements nats.CustomDialer.
func (f *freezer) Dial(network, address string) (net.Conn, error) {
	c, err := net.Dial(network, address)
	if err != nil {
		return nil, err
	}
	return &freezable{Conn: c, f: f}, nil
}

type freezable struct {
	net.Conn
	f *freezer
}

func (c *freezable) stopped() error {
	select {
	case <-c.f.frozen:
		<-c.f.ended
		return net.ErrClosed
	default:
		return nil
	}
}

func (c *freezable) Read(b []byte) (int, error) {
	if err := c.stopped(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if err == nil {
		err = c.stopped()
	}
	return n, err
}

func (c *freezable) Write(b []byte) (int, error) {
	if err := c.stopped(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// TestADeviceItsServerClosedAsStaleIsGoneSinceItFellSilent: a device that
// stops answering (a dead one) is closed by its server after its PINGs
// (here 2 s apart, 2 allowed unanswered: silent at least 4 s, long
// enough that a live client on a loaded machine answers in time); its
// last connection counts as gone StaleSilence before the disconnect,
// while a device that closes its connection itself is gone at the
// disconnect.
func TestADeviceItsServerClosedAsStaleIsGoneSinceItFellSilent(t *testing.T) {
	const silence = 4 * time.Second // ping_interval × ping_max
	c := startChainWith(t, callouttest.Options{EditConfig: func(conf string) string {
		return strings.NewReplacer(`ping_interval: "20s"`, `ping_interval: "2s"`).Replace(conf)
	}}, "dead", "closes", "probe")
	tr := c.trackWith(t, presence.Options{StaleSilence: silence})

	f := newFreezer()
	dead := c.connect(t, "dead", nats.SetCustomDialer(f))
	t.Cleanup(f.release) // before the connection's Close, which would wait for it
	closes := c.connect(t, "closes")
	testenv.Eventually(t, "both devices connected", wait, func() bool { return connected(tr, "dead") && connected(tr, "closes") })
	_, connectedSince := tr.Connected("dead")

	// The device's last word is now: a PING its server answers.
	if err := dead.Conn.Flush(); err != nil {
		t.Fatal(err)
	}
	frozeAt := time.Now()
	f.freeze()
	testenv.Eventually(t, "the server closing the silent device", wait, func() bool { return !connected(tr, "dead") })
	seenGone := time.Now()
	_, since := tr.Connected("dead")
	if !since.Before(seenGone.Add(-silence)) || since.Before(frozeAt.Add(-time.Second)) || since.Before(connectedSince) {
		t.Errorf("the dead device gone since %s; froze at %s, seen gone at %s: want %s before the disconnect, after it fell silent",
			since.Format(time.StampMilli), frozeAt.Format(time.StampMilli), seenGone.Format(time.StampMilli), silence)
	}

	closedAt := time.Now()
	closes.Close()
	testenv.Eventually(t, "the device that closed its connection gone", wait, func() bool { return !connected(tr, "closes") })
	if _, since := tr.Connected("closes"); since.Before(closedAt) {
		t.Errorf("the device that closed its connection at %s gone since %s: a clean close is gone at its disconnect",
			closedAt.Format(time.StampMilli), since.Format(time.StampMilli))
	}
}
