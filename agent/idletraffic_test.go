package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
)

// Categories of an idle device's traffic.
const (
	catHeartbeat = "heartbeats"
	catInventory = "inventory"
	catReports   = "workload reports and container telemetry"
	catGrant     = "token grants (provider)"
	catConnect   = "reconnects (INFO, CONNECT with the id_token, SUB)"
	catIntent    = "intent reads (JetStream API)"
	catNotify    = "notifications"
	catKeepalive = "keepalive (PING/PONG)"
	catTLS       = "TLS (handshakes, record overhead)"
	catOther     = "other"
)

// Production figures the measurement scales to.
const (
	prodTokenLifetime = 10 * time.Minute
	day               = 24 * time.Hour
	// tlsRecordOverhead is what TLS 1.3 with AES-GCM adds to each record:
	// a 5-byte header, the inner content type and a 16-byte tag.
	tlsRecordOverhead = 22
)

// TestIdleTraffic measures what an idle device costs the network
// (issue #37 item 5): the real agent (agent.Connect, agent.Run, the
// simulated runtime with one running Deployment) on the real auth chain
// (the callout, the provider, the embedded NATS server with the
// documented configuration: its PINGs, ADR 0032), with the production
// heartbeat (agent.DefaultHeartbeatInterval, and one on every connect) and an id_token lifetime of
// FLEET_IDLE_LIFETIME (default 2m30s: longer than the echo window, as the
// production lifetime is) for FLEET_IDLE_TRAFFIC (default 7m30s) after a
// warm-up of FLEET_IDLE_WARMUP (default 2m),
// counting the bytes of its NATS connection in both directions by
// protocol operation and subject, and of its provider connections. It
// scales to a day with the production lifetime of 10 minutes: the
// per-connection cost (grant, reconnect, the intent read after it) once
// per lifetime, the rest by the time measured. TLS is added as measured:
// a TLS 1.3 handshake with a two-certificate chain (CA and leaf, ECDSA
// P-256) per connection, and 22 bytes per write. A measurement, not a
// check: it runs only with FLEET_IDLE_TRAFFIC set; docs/performance.md
// publishes its figures.
func TestIdleTraffic(t *testing.T) {
	if os.Getenv("FLEET_IDLE_TRAFFIC") == "" {
		t.Skip("a measurement, not a check: set FLEET_IDLE_TRAFFIC to how long to measure (e.g. 5m)")
	}
	b := t
	run := envDuration(b, "FLEET_IDLE_TRAFFIC", 450*time.Second)
	lifetime := envDuration(b, "FLEET_IDLE_LIFETIME", 150*time.Second)
	full, resumed := tlsHandshakeBytes(b)
	m := measureIdle(b, run, lifetime)
	for _, hs := range []int64{full, resumed} {
		perDay := m.perDay(run, prodTokenLifetime, hs)
		var total int64
		names := make([]string, 0, len(perDay))
		for k, v := range perDay {
			names = append(names, k)
			total += v
		}
		slices.SortFunc(names, func(a, c string) int { return int(perDay[c] - perDay[a]) })
		b.Logf("idle device, %s measured, id_token lifetime %s scaled to %s, TLS handshake %d B (full %d, resumed %d): %d connections, %d grants, %d intent reads",
			run, lifetime, prodTokenLifetime, hs, full, resumed, m.conns, m.grants, m.jsRequests)
		b.Logf("%-52s %12s %12s %8s", "category", "bytes/day", "up+down", "share")
		for _, k := range names {
			b.Logf("%-52s %12d %12s %7.1f%%", k, perDay[k], m.split(k), 100*float64(perDay[k])/float64(total))
		}
		b.Logf("%-52s %12d (%.2f MB/day, %.1f B/s)", "total", total, float64(total)/1e6, float64(total)/day.Seconds())
	}
	// The same run scaled to other token lifetimes and heartbeat
	// intervals (resumed TLS sessions): MB per device per day.
	// A heartbeat interval of 0 is the agent's --heartbeat 0: on connect
	// only.
	heartbeats := []time.Duration{30 * time.Second, 5 * time.Minute, agent.DefaultHeartbeatInterval, 0}
	head := fmt.Sprintf("%-18s", "lifetime \\ heartbeat")
	for _, hb := range heartbeats {
		head += fmt.Sprintf(" %8s", hb)
	}
	b.Log(head)
	for _, l := range []time.Duration{10 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 8 * time.Hour} {
		perDay := m.perDay(run, l, resumed)
		line := fmt.Sprintf("%-18s", l)
		for _, hb := range heartbeats {
			var total float64
			for k, v := range perDay {
				if k != catHeartbeat {
					total += float64(v)
				}
			}
			// A heartbeat is one TLS record besides its bytes.
			total += (m.perBeat() + tlsRecordOverhead) * m.beatsPerDay(l, hb)
			total -= tlsRecordOverhead * m.beatsPerDay(l, idleHeartbeat) // counted in TLS already
			line += fmt.Sprintf(" %8.2f", total/1e6)
		}
		b.Log(line)
	}
}

// idleHeartbeat is the heartbeat interval the run measures with (the
// agent's default), idleResync its resync interval.
const (
	idleHeartbeat = agent.DefaultHeartbeatInterval
	idleResync    = 5 * time.Minute
)

func envDuration(b *testing.T, name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("$%s=%q: give a positive duration", name, v)
		}
		return d
	}
	return def
}

// idleMeasure is what one run counted.
type idleMeasure struct {
	mu sync.Mutex
	// up and down are bytes by category, agent to server and back.
	up, down map[string]int64
	// writes and reads count the calls on the NATS connections (TLS
	// records), grants the provider's token answers, conns the NATS
	// connections, httpConns the provider connections.
	writes, reads, grants, conns, httpConns int64
	// jsRequests counts the agent's JetStream API requests (intent reads),
	// beats its heartbeats (one on every connect, one every idleHeartbeat).
	jsRequests, beats int64
}

// perBeat is the bytes of one heartbeat measured (both ways).
func (m *idleMeasure) perBeat() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.beats == 0 {
		return 0
	}
	return float64(m.up[catHeartbeat]+m.down[catHeartbeat]) / float64(m.beats)
}

// beatsPerDay is how many heartbeats a day holds at lifetime (one per
// connection: the agent beats on every connect) and interval hb (0: on
// connect only).
func (m *idleMeasure) beatsPerDay(lifetime, hb time.Duration) float64 {
	n := float64(day) / float64(lifetime)
	if hb > 0 {
		n += float64(day) / float64(hb)
	}
	return n
}

func (m *idleMeasure) add(up bool, cat string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if up {
		m.up[cat] += n
	} else {
		m.down[cat] += n
	}
}

// reset zeroes the counts (the warm-up's).
func (m *idleMeasure) reset() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.up, m.down = map[string]int64{}, map[string]int64{}
	m.writes, m.reads, m.grants, m.conns, m.httpConns, m.jsRequests, m.beats = 0, 0, 0, 0, 0, 0, 0
}

func (m *idleMeasure) split(cat string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("%d/%d", m.up[cat], m.down[cat])
}

// perDay scales the run to a day at lifetime (of the id_token, so of the
// user JWT: one re-authorisation each). Grants,
// reconnects and what a reconnect makes the agent send (its inventory,
// the last report of every Deployment, their echoes): the bytes per
// grant and per connection measured, times one per lifetime. Intent
// reads: the bytes per read measured, times the reads of a lifetime: the
// reconnect's and one per resync interval (5 minutes) that passes without
// one (ADR 0034: a read restarts the resync), ceil(lifetime/resync). The others
// by time. TLS: a handshake of handshake bytes per NATS and provider
// connection, the record overhead per call.
func (m *idleMeasure) perDay(run, lifetime time.Duration, handshake int64) map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	cycles := float64(day) / float64(lifetime)
	reads := cycles * math.Ceil(float64(lifetime)/float64(idleResync))
	per := func(total, n int64) float64 {
		if n == 0 {
			return 0
		}
		return float64(total) / float64(n)
	}
	out := map[string]int64{}
	for _, dir := range []map[string]int64{m.up, m.down} {
		for k, v := range dir {
			switch {
			case k == catHeartbeat:
				// Bytes per beat times the beats of a day: one on
				// every connect, one every idleHeartbeat.
				if m.beats > 0 {
					out[k] += int64(float64(v) / float64(m.beats) * m.beatsPerDay(lifetime, idleHeartbeat))
				}
			case k == catGrant:
				out[k] += int64(per(v, m.grants) * cycles)
			case k == catIntent:
				out[k] += int64(per(v, m.jsRequests) * reads)
			case k == catConnect || k == catInventory || strings.HasPrefix(k, catReports):
				// Sent because of a reconnect: at idle nothing else
				// sends them (the inventory, every Deployment's last
				// report and the container snapshot go again after a
				// reconnect when they had not settled, and are echoed).
				out[k] += int64(per(v, m.conns) * cycles)
			default:
				out[k] += int64(float64(v) * float64(day) / float64(run))
			}
		}
	}
	// Records: the reconnect's share scales by connections, the rest by
	// time; the calls are few either way.
	records := float64(m.writes+m.reads) * float64(day) / float64(run)
	conns := per(m.conns+m.httpConns, m.conns) * cycles // NATS and provider connections per cycle
	out[catTLS] = int64(records*tlsRecordOverhead + conns*float64(handshake))
	return out
}

func measureIdle(b *testing.T, run, lifetime time.Duration) *idleMeasure {
	m := &idleMeasure{up: map[string]int64{}, down: map[string]int64{}}
	env := callouttest.StartWith(b, callouttest.Options{TokenLifetime: lifetime})
	key, err := credential.ReadKeyFile(env.EnrollDevice(b, "idle-1"))
	if err != nil {
		b.Fatal(err)
	}
	w := newWorld(b)
	w.r.Device = "idle-1"
	intent, err := json.Marshal(events.DeviceIntent{Device: "idle-1", Deployments: []events.IntentEntry{entry(b, 1, baseScore())}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := env.Intent.Put(context.Background(), "idle-1", intent); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	httpDial := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := httpDial.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.httpConns++
		m.mu.Unlock()
		return &countedConn{Conn: c, m: m, http: true}, nil
	}}
	dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: env.NATS.ClientURL(), Key: &key, Device: "idle-1",
		HTTPClient:  &http.Client{Transport: tr, Timeout: 10 * time.Second},
		NATSOptions: []nats.Option{nats.SetCustomDialer(&countingDialer{m: m})}})
	if err != nil {
		b.Fatal(err)
	}
	defer dc.Close()
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, agent.Options{Device: "idle-1", Conn: dc.Conn, Reconciler: w.r}) }()
	// The start-up (the first grant and connect, the inventory, the
	// pass and its reports, their echoes for agent.DefaultEchoWindow) is
	// not idle: counted from after the warm-up.
	select {
	case err := <-done:
		b.Fatalf("the agent stopped: %v", err)
	case <-time.After(envDuration(b, "FLEET_IDLE_WARMUP", 2*time.Minute)):
	}
	m.reset()
	select {
	case err := <-done:
		b.Fatalf("the agent stopped: %v", err)
	case <-time.After(run):
	}
	cancel()
	<-done
	return m
}

// countingDialer dials the NATS server and counts the connection.
type countingDialer struct{ m *idleMeasure }

func (d *countingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, 5*time.Second)
	if err != nil {
		return nil, err
	}
	d.m.mu.Lock()
	d.m.conns++
	d.m.mu.Unlock()
	return &countedConn{Conn: c, m: d.m, upP: &protoParser{}, downP: &protoParser{}}, nil
}

// countedConn counts what crosses a connection: a provider connection's
// bytes all as grants; a NATS connection's by protocol operation
// (protoParser).
type countedConn struct {
	net.Conn
	m          *idleMeasure
	http       bool
	upP, downP *protoParser
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.count(true, p[:n])
	return n, err
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.count(false, p[:n])
	return n, err
}

func (c *countedConn) count(up bool, p []byte) {
	if len(p) == 0 {
		return
	}
	if c.http {
		c.m.add(up, catGrant, int64(len(p)))
		if !up && bytes.Contains(p, []byte("id_token")) {
			c.m.mu.Lock()
			c.m.grants++
			c.m.mu.Unlock()
		}
		return
	}
	c.m.mu.Lock()
	if up {
		c.m.writes++
	} else {
		c.m.reads++
	}
	c.m.mu.Unlock()
	parser := c.downP
	if up {
		parser = c.upP
	}
	parser.feed(p, func(cat string, n int64) { c.m.add(up, cat, n) })
	if up {
		c.m.mu.Lock()
		c.m.jsRequests += int64(bytes.Count(p, []byte("PUB $JS.API")))
		c.m.beats += int64(bytes.Count(p, []byte(".heartbeat ")))
		c.m.mu.Unlock()
	}
}

// protoParser splits one direction of a NATS client connection into
// operations and names each one's category (categorise).
type protoParser struct {
	line    []byte
	payload int64  // bytes of the current message still to come
	cat     string // the current message's category
}

func (p *protoParser) feed(b []byte, count func(cat string, n int64)) {
	for len(b) > 0 {
		if p.payload > 0 {
			n := min(p.payload, int64(len(b)))
			count(p.cat, n)
			p.payload -= n
			b = b[n:]
			continue
		}
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			p.line = append(p.line, b...)
			return
		}
		line := append(p.line, b[:i]...)
		p.line = nil
		b = b[i+2:]
		cat, size := categorise(string(line))
		count(cat, int64(len(line)+2))
		if size > 0 {
			p.cat, p.payload = cat, size+2
		}
	}
}

// categorise names a protocol line's category and the size of the
// payload that follows it.
func categorise(line string) (string, int64) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return catOther, 0
	}
	switch strings.ToUpper(f[0]) {
	case "PING", "PONG":
		return catKeepalive, 0
	case "INFO", "CONNECT", "SUB", "UNSUB", "+OK", "-ERR":
		return catConnect, 0
	case "PUB", "HPUB", "MSG", "HMSG":
		size, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		return subjectCategory(f[1]), size
	}
	return catOther, 0
}

func subjectCategory(subject string) string {
	switch {
	case strings.HasSuffix(subject, ".heartbeat"):
		return catHeartbeat
	case strings.HasSuffix(subject, ".inventory"):
		return catInventory
	case strings.HasPrefix(subject, "fleet.report.") || strings.HasPrefix(subject, "fleet.telemetry."):
		return catReports + " (" + subject[strings.LastIndex(subject, ".")+1:] + ")"
	case strings.HasPrefix(subject, "fleet.notify."):
		return catNotify
	case strings.HasPrefix(subject, "$JS.") || strings.HasPrefix(subject, "$KV.") || strings.HasPrefix(subject, "_INBOX"):
		return catIntent
	}
	return catOther + " (" + subject + ")"
}

// tlsHandshakeBytes is what a TLS 1.3 handshake costs both ways with
// testChain's two-certificate chain, measured on an in-process pair: a
// full one, then one that resumes its session.
func tlsHandshakeBytes(b *testing.T) (full, resumed int64) {
	cert, pool := testChain(b)
	srvConf := &tls.Config{Certificates: []tls.Certificate{cert}}
	cliConf := &tls.Config{RootCAs: pool, ServerName: "nats-devices.fleet.example.com", MinVersion: tls.VersionTLS13,
		ClientSessionCache: tls.NewLRUClientSessionCache(1)}
	handshake := func() int64 {
		cs, cc := net.Pipe()
		m := &idleMeasure{up: map[string]int64{}, down: map[string]int64{}}
		srv := tls.Server(cs, srvConf)
		go func() {
			if srv.Handshake() == nil {
				_, _ = srv.Write([]byte("x")) // with the session ticket
			}
		}()
		cli := tls.Client(&countedConn{Conn: cc, m: m, http: true}, cliConf)
		if err := cli.Handshake(); err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Read(make([]byte, 1)); err != nil {
			b.Fatal(err)
		}
		_ = cli.Close()
		_ = srv.Close()
		return m.up[catGrant] + m.down[catGrant] - (1 + tlsRecordOverhead)
	}
	full = handshake()
	resumed = handshake()
	return full, resumed
}
