package chaos_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// connWatch records when a connection lost its server and when it was back.
type connWatch struct {
	mu   sync.Mutex
	lost time.Time
	back time.Time
	url  string
}

func watch(nc *nats.Conn) *connWatch {
	c := &connWatch{}
	nc.SetDisconnectErrHandler(func(*nats.Conn, error) {
		c.mu.Lock()
		c.lost = time.Now()
		c.mu.Unlock()
	})
	nc.SetReconnectHandler(func(nc *nats.Conn) {
		c.mu.Lock()
		c.back, c.url = time.Now(), nc.ConnectedUrl()
		c.mu.Unlock()
	})
	return c
}

func (c *connWatch) get() (lost, back time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lost, c.back
}

// TestNodeLossDuringARolloutLosesNoAcknowledgedEventAndTheRolloutCompletes
// runs the control plane on three nats-server processes (the product's
// auth callout configuration, R3 streams and buckets, sync_interval
// always), 20 devices in four agent processes and a ledger appending to an
// R3 stream configured like the Fleet durable streams. It rolls out a
// generation without a fault, then SIGKILLs the server leading
// FLEET_ROLLOUT right after the next generation's rollout started: the
// rollout must complete on the two survivors, the agents and the
// operator's connection reconnect to them, and after the server is
// restarted (and leads the streams again) every acknowledged append is in
// the ledger once, every transition is appended once, and the projections
// rebuilt from zero equal the live state.
func TestNodeLossDuringARolloutLosesNoAcknowledgedEventAndTheRolloutCompletes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	w := startWorld(t, ctx, worldOptions{servers: 3, devices: 20, perProcess: 5, calloutReplicas: 2, inProcessOperator: true})
	w.startLedger()
	op := watch(w.plane.Operator())

	began := time.Now()
	w.deploy(1)
	w.waitSucceeded(1, 5*time.Minute)
	clean := time.Since(began)
	t.Logf("generation 1 (no fault): succeeded on %d devices %s after the change", len(w.devices), clean.Round(10*time.Millisecond))

	subj, err := events.DeploymentRolloutSubject(w.ns, depName)
	if err != nil {
		t.Fatal(err)
	}
	victim := w.leaderOf(events.StreamRollout)
	// The ledger's leader is on the victim too: its acknowledgements
	// measure how long the streams the victim led cannot be written.
	w.moveLeader(ledgerStream, victim)
	opOnVictim := w.plane.Operator().ConnectedUrl() == w.cluster.ClientURL(victim)
	began = time.Now()
	w.deploy(2)
	w.waitFor("generation 2's rollout to start", 2*time.Minute, func() bool {
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		rec, err := w.st.Last(lctx, subj)
		return err == nil && rec.Event.Correlation.Generation == 2
	})
	killed := time.Now() // clients see the server go before Kill returns
	if err := w.cluster.Kill(victim); err != nil {
		t.Fatal(err)
	}
	acksBefore := w.ledger.Acked()
	on := w.devicesOn()
	t.Logf("devices by server before the kill: %v", on)
	t.Logf("SIGKILLed %s (leader of %s; the operator's connection was on it: %v), %s after generation 2's change, %d ledger appends acknowledged",
		w.cluster.Name(victim), events.StreamRollout, opOnVictim, killed.Sub(began).Round(time.Millisecond), acksBefore)

	var newLeader time.Duration
	w.waitFor("a new leader of "+events.StreamRollout, 2*time.Minute, func() bool {
		info, err := w.streamInfo(events.StreamRollout)
		ok := err == nil && info.Cluster != nil && info.Cluster.Leader != "" && info.Cluster.Leader != w.cluster.Name(victim)
		if ok {
			newLeader = time.Since(killed)
		}
		return ok
	})
	var writesBack time.Duration
	w.waitFor("the ledger's next acknowledgement", 2*time.Minute, func() bool {
		at, ok := w.ledger.FirstAckAfter(killed)
		writesBack = at.Sub(killed)
		return ok
	})

	succeeded := w.waitSucceeded(2, 5*time.Minute)
	faulted := succeeded.Sub(began)
	t.Logf("generation 2 (leader killed): succeeded on %d devices %s after the change", len(w.devices), faulted.Round(10*time.Millisecond))

	var back []time.Duration
	lost := on[w.cluster.Name(victim)]
	if err := testenv.Poll(ctx, 2*time.Minute, func() bool {
		back = w.reconnectTimes(killed)
		return len(back) >= lost
	}); err != nil {
		t.Fatalf("%v waiting for the %d devices on %s to reconnect: %d back; events since the kill:\n%s",
			err, lost, w.cluster.Name(victim), len(back), w.eventsSince(killed))
	}
	if opOnVictim {
		w.waitFor("the operator's connection to reconnect", time.Minute, func() bool {
			_, b := op.get()
			return b.After(killed)
		})
	}
	opLost, opBack := op.get()

	restarted := time.Now()
	if err := w.cluster.Restart(ctx, victim); err != nil {
		t.Fatal(err)
	}
	restartTook := time.Since(restarted)
	for _, s := range []string{ledgerStream, events.StreamRollout, events.StreamIntent, "KV_" + events.BucketIntent} {
		w.waitFor(w.cluster.Name(victim)+" to be current on "+s, 2*time.Minute, func() bool { return w.current(s, victim) })
	}
	caughtUp := time.Since(restarted)

	// A rollout with the server back.
	w.deploy(3)
	w.waitSucceeded(3, 5*time.Minute)

	w.endLedger()
	// Read everything back through the restarted server: it leads the
	// streams it lost and caught up.
	w.moveLeader(ledgerStream, victim)
	w.moveLeader(events.StreamRollout, victim)

	t.Run("every acknowledged append is in the ledger once, read through the restarted server", func(t *testing.T) {
		f, err := w.ledger.Check(ctx)
		t.Logf("ledger: %s", f)
		if err != nil {
			t.Fatal(err)
		}
		if f.Acked <= acksBefore {
			t.Errorf("no append was acknowledged after the kill (%d before, %d in all)", acksBefore, f.Acked)
		}
	})
	t.Run("every rollout transition is appended once", func(t *testing.T) { w.transitionsOnce(t, []int64{1, 2, 3}) })
	t.Run("the projections rebuilt from zero equal the live state", func(t *testing.T) { w.rebuildEqualsLive(t) })

	var backs []string
	for _, b := range back {
		backs = append(backs, b.Round(10*time.Millisecond).String())
	}
	opLine := "was not on the killed server"
	if opOnVictim {
		opLine = "lost its server " + opLost.Sub(killed).Round(time.Millisecond).String() + " after the kill, back after " +
			opBack.Sub(killed).Round(time.Millisecond).String()
	}
	t.Logf("figures (from the SIGKILL of %s):\n"+
		"  new %s leader seen after   %s (polled, 1 s per request)\n"+
		"  ledger writes acknowledged again after %s (longest time without an ack in the run: %s)\n"+
		"  devices that lost their server: %d of %d, reconnected after [%s]\n"+
		"  operator connection %s\n"+
		"  rollout completion: %s without a fault, %s with the leader killed\n"+
		"  restarted server healthy after %s, current on the streams after %s",
		w.cluster.Name(victim), events.StreamRollout, newLeader.Round(time.Millisecond), writesBack.Round(time.Millisecond),
		w.ledger.MaxGap().Round(time.Millisecond), lost, len(w.devices), strings.Join(backs, " "), opLine, clean.Round(10*time.Millisecond),
		faulted.Round(10*time.Millisecond), restartTook.Round(time.Millisecond), caughtUp.Round(time.Millisecond))
}
