package natscluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
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

// TestStartReturnsOnceTheMetaLeaderCountsEveryPeerCurrent: every server
// healthy is not enough for placement: the meta leader may still count a
// peer offline ("no suitable peers for placement", JetStream error 10005)
// moments after the cluster formed. Start returns only once the leader's
// /jsz counts every other server current and online, so the first answer
// to creating an R3 bucket places it. (The old Start returned with a
// five-server cluster's leader counting two of its four peers, one of
// them not current.)
func TestStartReturnsOnceTheMetaLeaderCountsEveryPeerCurrent(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
	}{{"three servers", 3}, {"five servers", 5}} {
		t.Run(tc.name, func(t *testing.T) { startedClusterPlaces(t, tc.n) })
	}
}

// startedClusterPlaces checks a cluster of n servers as Start returns it.
func startedClusterPlaces(t *testing.T, n int) {
	c := start(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var leaders []string
	for i := range c.N() {
		meta := jszMeta(t, ctx, c.MonitorURL(i))
		if meta == nil || meta.Leader != c.Name(i) {
			continue
		}
		leaders = append(leaders, c.Name(i))
		var got []peer
		for _, p := range meta.Replicas {
			got = append(got, peer{Name: p.Name, Current: p.Current, Offline: p.Offline})
		}
		var want []peer
		for j := range c.N() {
			if j != i {
				want = append(want, peer{Name: c.Name(j), Current: true})
			}
		}
		sortPeers(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("the meta leader %s's peers when Start returned (-want +got):\n%s", c.Name(i), diff)
		}
	}
	if len(leaders) != 1 {
		t.Fatalf("servers that say they are the meta leader when Start returned: %v, want one", leaders)
	}
	nc, err := nats.Connect(c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A request the cluster forms routes for may go unanswered (each try
	// is bounded and tried again); an answer must not be a refusal.
	var created error
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, created = js.CreateKeyValue(cctx, jetstream.KeyValueConfig{Bucket: "placed", Replicas: min(n, 3)})
		return !errors.Is(created, context.DeadlineExceeded)
	}); err != nil {
		t.Fatalf("no answer to creating an R3 bucket: %v", err)
	}
	if created != nil {
		t.Fatalf("an R3 bucket created as Start returned: %v", created)
	}
}

// peer is what the test compares of a meta group peer.
type peer struct {
	Name             string
	Current, Offline bool
}

func sortPeers(ps []peer) {
	slices.SortFunc(ps, func(a, b peer) int { return strings.Compare(a.Name, b.Name) })
}

// jszMeta is the meta_cluster of a server's /jsz (nil: none).
func jszMeta(t *testing.T, ctx context.Context, monitor string) *server.MetaClusterInfo {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitor+"/jsz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var jsz server.JSInfo
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		t.Fatalf("%s/jsz: %v", monitor, err)
	}
	return jsz.Meta
}
