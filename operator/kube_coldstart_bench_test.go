package operator_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/operator"
)

// BenchmarkKubeColdStart is the operator's cold start at scale:
// FLEET_KUBE_DEVICES (default 1,000; issue #39 asks for 100,000) Device
// objects in the real kube-apiserver, projected once by a first operator
// (fleet-identity entries, finalizers, statuses). Then, with no operator
// running, a Deployment selecting every Device is applied, and a new
// operator starts: timed from its start until it appended the revision
// (decided the rollout), and until its Device controller reconciled every
// Device once (the per-object part of a start: its NATS requests and API
// server requests are counted). Then a leader failover: a standby operator
// runs, the leader stops, a second Deployment is applied, timed from the
// stop until the standby appended its revision (the Lease's expiry
// included, ADR 0011). It asserts no timing.
func BenchmarkKubeColdStart(b *testing.B) {
	n := envInt("FLEET_KUBE_DEVICES", 1000)
	for range b.N {
		kubeColdStart(b, n)
	}
}

func kubeColdStart(b *testing.B, n int) {
	b.StopTimer()
	e := benchEnv(b, 30*time.Minute)
	ctx := e.ctx
	labels := map[string]string{"role": "cold-bench"}
	created := createDevices(b, e, n, labels, func(i int) string { return fmt.Sprintf("cs-%d", i) })
	withDeviceController(e)
	idkv, err := e.store.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		b.Fatal(err)
	}
	first := time.Now()
	stopFirst := e.startOperator()
	e.waitLong("every Device's fleet-identity entry", func() bool {
		st, err := idkv.Status(ctx)
		return err == nil && st.Values() >= uint64(n)
	})
	projected := time.Since(first)
	// Let the first operator's Device writes settle (finalizers, statuses).
	settleReconciles(b, e)
	stopFirst()

	// Cold start: the Deployment waits for an operator. From now on the
	// operators elect a leader (the Lease in the test's namespace).
	e.leaderElection = operator.LeaderElection{Enabled: true, Namespace: e.ns}
	e.deployment("cold", labels)
	conn := e.store.JetStream().Conn()
	// Per-Device reads, counted on the server: direct gets of a device's
	// reports and of its fleet-identity key (issue #39: none at a start).
	var gets atomic.Int64
	for _, stream := range []string{events.StreamLiveness, events.StreamTelemetry, "KV_" + events.BucketIdentity} {
		sub, err := conn.Subscribe("$JS.API.DIRECT.GET."+stream+".>", func(*nats.Msg) { gets.Add(1) })
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	if err := conn.Flush(); err != nil {
		b.Fatal(err)
	}
	recBefore, reqBefore, apiBefore := deviceReconciles(b), conn.Stats().OutMsgs, resources(apiRequests(b, e))
	b.StartTimer()
	start := time.Now()
	stopSecond := e.startOperator()
	rev := waitRevision(b, e, "cold")
	decided := time.Since(start)
	e.waitLong("a Device reconcile per Device", func() bool { return deviceReconciles(b).count-recBefore.count >= float64(n) })
	reconciled := time.Since(start)
	b.StopTimer()
	rec := deviceReconciles(b)
	natsReqs := conn.Stats().OutMsgs - reqBefore
	deviceGets := gets.Load()
	api := delta(apiBefore, resources(apiRequests(b, e)))
	if len(rev.Targets) != n && rev.TargetChunks == 0 {
		b.Fatalf("the revision has %d targets, want %d", len(rev.Targets), n)
	}

	// Leader failover: a standby takes over when the leader stops.
	e.startOperator()
	settleReconciles(b, e)
	stopSecond()
	failStart := time.Now()
	e.deployment("failover", labels)
	waitRevision(b, e, "failover")
	failover := time.Since(failStart)

	fmt.Printf("kube cold start, %d Devices: created in %s; first projection %s (%.0f Devices/s)\n",
		n, created.Round(time.Millisecond), projected.Round(time.Millisecond), float64(n)/projected.Seconds())
	fmt.Printf("  operator start → revision appended (rollout decided) %s; → every Device reconciled once %s (%.0f Devices/s)\n",
		decided.Round(time.Millisecond), reconciled.Round(time.Millisecond), float64(n)/reconciled.Seconds())
	fmt.Printf("  during the cold start: %.0f Device reconciles (%.2f per Device), %.1f ms each; %d messages to NATS from the operator's connection (%.2f per Device); API server requests %.0f (%.3f per Device): %s\n",
		rec.count-recBefore.count, (rec.count-recBefore.count)/float64(n), 1000*(rec.seconds-recBefore.seconds)/max(rec.count-recBefore.count, 1),
		natsReqs, float64(natsReqs)/float64(n), total(api), total(api)/float64(n), byKey(api))
	fmt.Printf("  leader stopped → the standby appended a new revision %s (a clean stop: the Lease released)\n", failover.Round(time.Millisecond))
	met := map[bool]string{true: "met", false: "NOT met"}
	fmt.Printf("goal        %d Devices: no read per Device at the operator's start (direct gets of reports and identities, fewer than one per 10 Devices): %d: %s\n",
		n, deviceGets, met[float64(deviceGets) < float64(n)/10])
	fmt.Printf("goal        %d Devices: no API request per Device at the operator's start (fewer than one per 10 Devices): %.0f: %s\n",
		n, total(api), met[total(api) < float64(n)/10])
	b.ReportMetric(decided.Seconds(), "decided-s")
	b.ReportMetric(reconciled.Seconds(), "reconciled-s")
	b.ReportMetric(float64(natsReqs)/float64(n), "nats-msgs/device")
	b.ReportMetric(float64(deviceGets)/float64(n), "device-gets/device")
	b.ReportMetric(failover.Seconds(), "failover-s")
}

// waitRevision waits (the benchmark's deadline) for the Deployment's first
// revision and returns it.
func waitRevision(b *testing.B, e *env, name string) events.DeploymentRevisionCreated {
	b.Helper()
	var rev events.DeploymentRevisionCreated
	e.waitLong("the revision of "+name, func() bool {
		recs := e.intent(name)
		if len(recs) == 0 {
			return false
		}
		d, err := events.Decode[events.DeploymentRevisionCreated](recs[len(recs)-1].Event)
		rev = d
		return err == nil && d.UID != ""
	})
	return rev
}

// settleReconciles waits until the Device controllers did no reconcile for
// a second (at most a minute).
func settleReconciles(b *testing.B, e *env) {
	b.Helper()
	last := deviceReconciles(b).count
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		select {
		case <-e.ctx.Done():
			return
		case <-tick.C:
		}
		now := deviceReconciles(b).count
		if now == last {
			return
		}
		last = now
	}
}
