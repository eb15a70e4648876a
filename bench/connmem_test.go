package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/internal/natscluster"
)

// connMemMode is one way of connecting the benchmark's clients: which
// publish allow list each user has (nil: no user, no permissions).
type connMemMode struct {
	name string
	// pub rewrites the device's publish allow list; nil keeps it.
	pub   func(dev string, allow []string) []string
	perms bool
}

// BenchmarkConnectionMemory measures what nats-server keeps per client
// connection, on a fresh nats-server process each mode (its prof_port:
// heap in use after a forced collection, goroutine stacks, RSS): N
// clients (FLEET_CONNMEM_CLIENTS, default 2,000), each with a device's
// three subscriptions (its intent notifications, its commands, its
// request inbox), two reports and one direct get published; first as
// plain clients without permissions (nats-server's floor), then each as a
// static user with the allow lists authcallout.DevicePermissions gives
// the device (what the callout's user JWT sets, without the callout),
// then two shapes the product does not use, to say what a list entry
// costs: the direct get under a 4-token subject, and every report kind
// under one wildcard (which the device trust boundary forbids: a device
// may not publish a kind that does not exist). A measurement printed per
// connection, not a check; docs/performance.md, "Memory per device".
func BenchmarkConnectionMemory(b *testing.B) {
	n := 2000
	if v := os.Getenv("FLEET_CONNMEM_CLIENTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("FLEET_CONNMEM_CLIENTS=%q: want a positive count", v)
		}
	}
	modes := []connMemMode{
		{name: "plain clients, no permissions"},
		{name: "the device permission lists", perms: true},
		{name: "direct get under a 4-token subject (not used)", perms: true, pub: func(dev string, allow []string) []string {
			for i, s := range allow {
				if strings.HasPrefix(s, "$JS.") {
					allow[i] = "fleet.intent.get." + dev
				}
			}
			return allow
		}},
		{name: "report kinds under one wildcard (forbidden)", perms: true, pub: func(dev string, allow []string) []string {
			out := []string{"fleet.report." + dev + ".*"}
			for _, s := range allow {
				if !strings.HasPrefix(s, "fleet.report.") {
					out = append(out, s)
				}
			}
			return out
		}},
	}
	for b.Loop() {
		for _, m := range modes {
			heap, stacks, rss := connectionMemory(b, m, n)
			fmt.Printf("%-48s %6.1f KB heap, %5.1f KB goroutine stacks, %6.1f KB RSS per connection (%d clients)\n",
				m.name, heap/1024, stacks/1024, rss/1024, n)
		}
	}
}

// connectionMemory connects n clients of mode m to a fresh nats-server
// and returns its heap, stacks and RSS growth per client, bytes.
func connectionMemory(b *testing.B, m connMemMode, n int) (heap, stacks, rss float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conf := ""
	if m.perms {
		var sb strings.Builder
		sb.WriteString("authorization { users: [\n")
		for i := 1; i <= n; i++ {
			dev := DeviceName(i)
			p, err := authcallout.DevicePermissions(dev)
			if err != nil {
				b.Fatal(err)
			}
			pub := []string(p.Pub.Allow)
			if m.pub != nil {
				pub = m.pub(dev, pub)
			}
			fmt.Fprintf(&sb, "  { user: %q, password: \"x\", permissions: { publish: { allow: [%s] }, subscribe: { allow: [%s] } } }\n",
				dev, quoted(pub), quoted(p.Sub.Allow))
		}
		sb.WriteString("] }\n")
		conf = sb.String()
	}
	c, err := natscluster.Start(ctx, natscluster.Options{N: 1, Dir: b.TempDir(), Config: conf, Profile: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s := newClusterServers(c)
	before, err := s.heap(ctx)
	if err != nil {
		b.Fatal(err)
	}
	rssBefore := s.rss()
	conns := make([]*nats.Conn, 0, n)
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	for i := 1; i <= n; i++ {
		dev := DeviceName(i)
		opts := []nats.Option{nats.CustomInboxPrefix(authcallout.InboxPrefix(dev))}
		if m.perms {
			opts = append(opts, nats.UserInfo(dev, "x"))
		}
		nc, err := nats.Connect(c.ClientURL(0), opts...)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, nc)
		// The agent's subscriptions: notifications, commands, the request
		// inbox a direct get makes.
		for _, subj := range []string{"fleet.notify.intent." + dev, "fleet.command." + dev, authcallout.InboxPrefix(dev) + ".mux.*"} {
			if _, err := nc.Subscribe(subj, func(*nats.Msg) {}); err != nil {
				b.Fatal(err)
			}
		}
		for _, subj := range []string{"fleet.report." + dev + ".heartbeat", "fleet.report." + dev + ".inventory",
			"$JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent." + dev} {
			if err := nc.Publish(subj, make([]byte, 300)); err != nil {
				b.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	after, err := s.heap(ctx)
	if err != nil {
		b.Fatal(err)
	}
	per := func(a, z uint64) float64 { return (float64(z) - float64(a)) / float64(n) }
	return per(before.Heap, after.Heap), per(before.Stacks, after.Stacks), per(rssBefore, s.rss())
}

// quoted is a configuration list's items, quoted.
func quoted(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
