// Package presence owns the operator's view of which devices have a
// connection up (ADR 0032): it follows the connect and disconnect events
// every NATS server of the cluster emits for the device account
// ($SYS.ACCOUNT.<account>.CONNECT and .DISCONNECT) and reconciles them
// with the servers' own connection lists ($SYS.REQ.ACCOUNT.<account>.CONNZ,
// paged per server) at start, after its connection came back, and
// periodically, so an operator restart, a leader failover, a server
// restart and an event lost in a gap all converge on what the servers
// hold.
//
// A connection names its device only by the user the server set from the
// callout-issued user JWT (ClientInfo.User, ConnInfo.AuthorizedUser: the
// JWT's name, the device id): never by the client name a device chooses
// in its CONNECT. A device is connected while at least one of its
// connections (server id, client id) is up.
//
// A connection its server closed because the client answered none of its
// PINGs (reason "Stale Connection") had been silent for a while already:
// when it was a device's last, the device counts as gone
// Options.StaleSilence before the event, the least silence the servers'
// ping settings allow, so a device that died is Stale that much sooner.
package presence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of Options.
const (
	// DefaultAccount is the device account of the documented server
	// configuration (authcallout.AccountDevices).
	DefaultAccount  = "DEVICES"
	DefaultResync   = 2 * time.Minute
	DefaultPageSize = 1024
	DefaultQuiet    = 500 * time.Millisecond
	DefaultTimeout  = 10 * time.Second
)

// Options configure a Tracker.
type Options struct {
	// Conn is a connection of the system account's fleet-presence user
	// (authcallout.PresenceUser), with its inbox prefix. Required.
	Conn *nats.Conn
	// Account is the device account's name (DEVICES). Required.
	Account string
	// Changed is called, from the tracker's goroutine, with a device whose
	// connected state changed (first connection up, last one gone).
	// Optional.
	Changed func(device string)
	// Resync is how often the connection lists are read again; default
	// DefaultResync.
	Resync time.Duration
	// PageSize is how many connections one CONNZ reply carries at most;
	// default DefaultPageSize.
	PageSize int
	// Quiet is how long a gather of the servers' replies waits for one
	// more after the last; default DefaultQuiet. Timeout bounds one
	// request; default DefaultTimeout.
	Quiet, Timeout time.Duration
	// Log receives the tracker's records; nil: discard.
	Log *slog.Logger
	// Now is the clock of the connect and disconnect times; nil: time.Now.
	Now func() time.Time
	// StaleSilence is how long a client at least sent nothing before its
	// server closes it as stale: ping_interval × ping_max of the servers'
	// configuration (authcallout.StaleSilence for the documented one). A device whose last connection is closed so counts as gone
	// that long before the event, never before it connected. Zero: at the
	// event.
	StaleSilence time.Duration
}

// staleReason is the reason a server gives in the disconnect event of a
// client it closed for not answering its PINGs.
const staleReason = "Stale Connection"

// Validate checks o and fills in the defaults.
func (o *Options) Validate() error {
	var errs []error
	if o.Conn == nil {
		errs = append(errs, errors.New("presence: Options.Conn is nil: give a connection of the fleet-presence user"))
	}
	if o.Account == "" {
		errs = append(errs, errors.New("presence: Options.Account is empty: give the device account (DEVICES)"))
	}
	if o.Resync < 0 || o.PageSize < 0 || o.Quiet < 0 || o.Timeout < 0 {
		errs = append(errs, errors.New("presence: Options.Resync, PageSize, Quiet and Timeout must not be negative (zero: the default)"))
	}
	if o.StaleSilence < 0 {
		errs = append(errs, errors.New("presence: Options.StaleSilence must not be negative (zero: a stale connection is gone at its event)"))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if o.Resync == 0 {
		o.Resync = DefaultResync
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.Quiet == 0 {
		o.Quiet = DefaultQuiet
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// connKey names one connection: the server's id and the client id it gave.
type connKey struct {
	server string
	cid    uint64
}

type conn struct {
	device string
	// seq is the tracker's event count when the connection was learned.
	seq uint64
}

type device struct {
	up int
	// since is when the first connection came up (up > 0) or the last one
	// went (up == 0).
	since time.Time
}

// Tracker is the view of the device connections. Its methods are safe for
// concurrent use.
type Tracker struct {
	o Options

	mu sync.Mutex
	// conns and devices are guarded by mu.
	conns   map[connKey]conn
	devices map[string]*device
	// seq counts the events applied; gone holds the connections whose
	// disconnect was seen, with the seq then (pruned at each resync).
	seq  uint64
	gone map[connKey]uint64
	// missed counts the resyncs in a row a server that holds connections
	// did not answer.
	missed map[string]int
	synced chan struct{}
	once   sync.Once
}

// New returns a Tracker for o (Validate).
func New(o Options) (*Tracker, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	return &Tracker{o: o, conns: map[connKey]conn{}, devices: map[string]*device{}, gone: map[connKey]uint64{},
		missed: map[string]int{}, synced: make(chan struct{})}, nil
}

// Connected reports whether device has a connection up, and since when
// it has (connected) or since when its last connection is gone (not
// connected); a zero time: none seen since the tracker started.
func (t *Tracker) Connected(device string) (bool, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.devices[device]
	if d == nil {
		return false, time.Time{}
	}
	return d.up > 0, d.since
}

// Synced is closed once the first reconciliation with the servers'
// connection lists completed.
func (t *Tracker) Synced() <-chan struct{} { return t.synced }

// Count is how many devices have a connection up.
func (t *Tracker) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, d := range t.devices {
		if d.up > 0 {
			n++
		}
	}
	return n
}

// Subjects of the servers' events and requests.
func (t *Tracker) connectSubject() string    { return "$SYS.ACCOUNT." + t.o.Account + ".CONNECT" }
func (t *Tracker) disconnectSubject() string { return "$SYS.ACCOUNT." + t.o.Account + ".DISCONNECT" }
func (t *Tracker) connzSubject() string      { return "$SYS.REQ.ACCOUNT." + t.o.Account + ".CONNZ" }

const shutdownSubject = "$SYS.SERVER.*.SHUTDOWN"

// Run follows the events and reconciles with the connection lists until
// ctx ends (nil then). A failed reconciliation is logged and tried again
// at the next resync.
func (t *Tracker) Run(ctx context.Context) error {
	events := make(chan *nats.Msg, 4096)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subj := range []string{t.connectSubject(), t.disconnectSubject(), shutdownSubject} {
		s, err := t.o.Conn.ChanSubscribe(subj, events)
		if err != nil {
			return fmt.Errorf("presence: subscribe %s: %w", subj, err)
		}
		subs = append(subs, s)
	}
	// A gap of the tracker's own connection loses events: reconcile once
	// it is back.
	back := make(chan struct{}, 1)
	t.o.Conn.SetReconnectHandler(func(*nats.Conn) {
		select {
		case back <- struct{}{}:
		default:
		}
	})
	if err := t.o.Conn.Flush(); err != nil {
		return fmt.Errorf("presence: subscribe: %w", err)
	}
	resyncs := make(chan error, 1)
	resyncing := false
	resync := func() {
		if resyncing {
			return
		}
		resyncing = true
		go func() { resyncs <- t.resync(ctx) }()
	}
	resync()
	tick := time.NewTicker(t.o.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if resyncing {
				<-resyncs
			}
			return nil
		case m := <-events:
			t.apply(m)
		case err := <-resyncs:
			resyncing = false
			if err != nil {
				t.o.Log.WarnContext(ctx, "device connections not reconciled", "error", err)
				continue
			}
			t.once.Do(func() { close(t.synced) })
		case <-back:
			resync()
		case <-tick.C:
			resync()
		}
	}
}

// clientInfo is what the tracker reads of a server's ClientInfo.
type clientInfo struct {
	ID      uint64 `json:"id"`
	Account string `json:"acc"`
	// User is set by the server: for a device, the name of the user JWT
	// the callout issued (the device id). Name, the device's own choice,
	// is never read.
	User string `json:"user"`
	Kind string `json:"kind"`
}

type serverInfo struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// eventMsg is a connect or disconnect event; Reason is a disconnect's.
type eventMsg struct {
	Server serverInfo `json:"server"`
	Client clientInfo `json:"client"`
	Reason string     `json:"reason"`
}

func (t *Tracker) apply(m *nats.Msg) {
	if m.Subject != t.connectSubject() && m.Subject != t.disconnectSubject() {
		// $SYS.SERVER.<id>.SHUTDOWN: a server shuts down, its
		// connections are gone (it sends no disconnect for them).
		if tok := strings.Split(m.Subject, "."); len(tok) == 4 && tok[3] == "SHUTDOWN" && tok[2] != "" {
			t.dropServer(tok[2])
		}
		return
	}
	var ev eventMsg
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.o.Log.Warn("device connection event ignored", "subject", m.Subject, "error", err)
		return
	}
	if ev.Server.ID == "" || ev.Client.Account != t.o.Account || ev.Client.User == "" || (ev.Client.Kind != "" && ev.Client.Kind != "Client") {
		return
	}
	k := connKey{ev.Server.ID, ev.Client.ID}
	var changed []string
	t.mu.Lock()
	t.seq++
	if m.Subject == t.connectSubject() {
		if _, ok := t.gone[k]; !ok {
			changed = t.add(k, ev.Client.User)
		}
	} else {
		t.gone[k] = t.seq
		var silent time.Duration
		if ev.Reason == staleReason {
			silent = t.o.StaleSilence
		}
		changed = t.remove(k, silent)
	}
	t.mu.Unlock()
	t.notify(changed)
}

// add records connection k of device; mu held. It returns the device when
// its connected state changed.
func (t *Tracker) add(k connKey, dev string) []string {
	if c, ok := t.conns[k]; ok {
		if c.device == dev {
			return nil
		}
		changed := t.remove(k, 0)
		return append(changed, t.add(k, dev)...)
	}
	t.conns[k] = conn{device: dev, seq: t.seq}
	d := t.devices[dev]
	if d == nil {
		d = &device{}
		t.devices[dev] = d
	}
	d.up++
	if d.up == 1 {
		d.since = t.o.Now()
		return []string{dev}
	}
	return nil
}

// remove forgets connection k, which had been silent for silent before
// now (a stale connection's); mu held. It returns the device when it has
// no connection left: gone since then, but not before it connected.
func (t *Tracker) remove(k connKey, silent time.Duration) []string {
	c, ok := t.conns[k]
	if !ok {
		return nil
	}
	delete(t.conns, k)
	d := t.devices[c.device]
	d.up--
	if d.up == 0 {
		gone := t.o.Now().Add(-silent)
		if gone.Before(d.since) {
			gone = d.since
		}
		d.since = gone
		return []string{c.device}
	}
	return nil
}

// dropServer forgets every connection of server.
func (t *Tracker) dropServer(server string) {
	var changed []string
	t.mu.Lock()
	t.seq++
	for k := range t.conns {
		if k.server == server {
			t.gone[k] = t.seq
			changed = append(changed, t.remove(k, 0)...)
		}
	}
	delete(t.missed, server)
	t.mu.Unlock()
	t.notify(changed)
}

func (t *Tracker) notify(devices []string) {
	if t.o.Changed == nil {
		return
	}
	for _, d := range devices {
		t.o.Changed(d)
	}
}
