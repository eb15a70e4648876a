package natscluster_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/internal/natscluster"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// start starts a cluster of n servers without authentication, killed at
// the end of the test; a failed test shows the servers' log tails.
func start(t *testing.T, n int) *natscluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := natscluster.Start(ctx, natscluster.Options{N: n, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.LogTails(30))
		}
		c.Close()
	})
	return c
}

func TestOptionsNameTheFieldToFix(t *testing.T) {
	tests := []struct {
		name string
		o    natscluster.Options
		want string
	}{
		{"no servers", natscluster.Options{Dir: "x"}, "N is 0"},
		{"too many servers", natscluster.Options{N: 10, Dir: "x"}, "N is 10"},
		{"no folder", natscluster.Options{N: 3}, "Dir is empty"},
		{"a configuration that sets the server name", natscluster.Options{N: 3, Dir: "x", Config: "server_name: a\n"}, `"server_name"`},
		{"a configuration with its own cluster block", natscluster.Options{N: 3, Dir: "x", Config: "a: 1\ncluster {}\n"}, `"cluster"`},
		{"a sync interval that is no duration", natscluster.Options{N: 3, Dir: "x", SyncInterval: "often"}, "SyncInterval"},
		{"a memory limit in gigabytes", natscluster.Options{N: 3, Dir: "x", MemoryLimit: "2GB"}, "MemoryLimit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	if err := (natscluster.Options{N: 3, Dir: "x", SyncInterval: "2m"}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// TestEachServerRunsWithTheMemoryLimitGiven: Options.MemoryLimit is each
// server process's GOMEMLIMIT (the Go runtime's soft limit, as the
// production composition sets it on its NATS nodes).
func TestEachServerRunsWithTheMemoryLimitGiven(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := natscluster.Start(ctx, natscluster.Options{N: 1, Dir: t.TempDir(), MemoryLimit: "512MiB"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", c.PID(0)))
	if err != nil {
		t.Fatal(err)
	}
	var limits []string
	for _, kv := range strings.Split(string(env), "\x00") {
		if strings.HasPrefix(kv, "GOMEMLIMIT=") {
			limits = append(limits, kv)
		}
	}
	if diff := cmp.Diff([]string{"GOMEMLIMIT=512MiB"}, limits); diff != "" {
		t.Errorf("the server's GOMEMLIMIT (-want +got):\n%s", diff)
	}
}

// TestAnR3StreamKeepsItsAcknowledgedMessagesWhenItsLeaderIsKilledAndRestarted
// is the harness's own check: three processes form a cluster, an R3
// stream elects a new leader after its leader is SIGKILLed, takes more
// writes on two servers, and the restarted server catches up with all of
// them.
func TestAnR3StreamKeepsItsAcknowledgedMessagesWhenItsLeaderIsKilledAndRestarted(t *testing.T) {
	c := start(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			var err error
			if perr := testenv.Poll(ctx, time.Minute, func() bool {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				defer pcancel()
				_, err = js.Publish(pctx, "t.x", []byte(fmt.Sprint(i)), jetstream.WithMsgID(fmt.Sprint(i)))
				return err == nil
			}); perr != nil {
				t.Fatalf("publish %d: %v (last error %v)", i, perr, err)
			}
		}
	}
	publish(0, 50)
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 {
		t.Fatalf("leader %q is none of the cluster's servers", info.Cluster.Leader)
	}
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if c.Running(leader) {
		t.Fatal("the killed server still runs")
	}
	// A request to a stream without a leader is not answered (no "no
	// responders" either): every call is bounded.
	var last string
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		defer icancel()
		info, err := s.Info(ictx)
		if err != nil {
			last = fmt.Sprintf("%v (client %s on %s)", err, nc.Status(), nc.ConnectedUrl())
			return false
		}
		last = "leader " + info.Cluster.Leader
		return info.Cluster.Leader != "" && c.Index(info.Cluster.Leader) != leader
	}); err != nil {
		t.Fatalf("%v waiting for a new stream leader; last seen: %s", err, last)
	}
	publish(50, 100)
	if err := c.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the restarted server to be current", time.Minute, func() bool {
		ictx, icancel := context.WithTimeout(ctx, 5*time.Second)
		defer icancel()
		info, err := s.Info(ictx)
		if err != nil || info.State.Msgs != 100 {
			return false
		}
		for _, p := range info.Cluster.Replicas {
			if p.Name == c.Name(leader) {
				return p.Current
			}
		}
		return info.Cluster.Leader == c.Name(leader)
	})
}
