// Package natstest starts an embedded JetStream server for tests (port -1, a
// temporary store) and connects clients to it. Only tests import it.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natsembed"
)

// Start runs a server on a free port with a temporary store and the fast
// sync policy; it is shut down when the test ends. Pass a store directory to
// restart a server on the same store; "" makes a new one.
func Start(tb testing.TB, storeDir string) *natsembed.Server {
	tb.Helper()
	return StartWith(tb, natsembed.Options{StoreDir: storeDir, Sync: natsembed.FastSync})
}

// StartWith runs a server with o (Port -1 and a temporary store by default).
func StartWith(tb testing.TB, o natsembed.Options) *natsembed.Server {
	tb.Helper()
	if o.StoreDir == "" {
		o.StoreDir = tb.TempDir()
	}
	if o.Port == 0 {
		o.Port = -1
	}
	s, err := natsembed.Start(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Shutdown)
	return s
}

// Connect connects a client, closed when the test ends.
func Connect(tb testing.TB, s *natsembed.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Provisioned starts a server, provisions the Fleet streams and buckets and
// returns a store on a fresh connection.
func Provisioned(tb testing.TB) (*natsembed.Server, *events.Store) {
	tb.Helper()
	s := Start(tb, "")
	nc := Connect(tb, s)
	st, err := events.NewStore(nc, events.StoreOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		tb.Fatal(err)
	}
	return s, st
}
