package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/slowlink"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/operator"
)

var (
	slowImageMiB = flag.Int("slowlink.image-mib", 50, "BenchmarkPrefetchRolloutOverASlowLink: the new image's size in MiB")
	slowRate     = flag.Int64("slowlink.rate", 1<<20, "BenchmarkPrefetchRolloutOverASlowLink: each device's downlink in bytes per second")
	slowReset    = flag.Int64("slowlink.reset-every", 0, "BenchmarkPrefetchRolloutOverASlowLink: reset a connection about every that many bytes (0: a steady link)")
	slowPodman   = flag.Bool("slowlink.podman", true, "BenchmarkPrefetchRolloutOverASlowLink: the first device runs on the real Podman, pulling from the test registry through its link")
)

// slowDevices is how many devices the Deployment targets (issue #37: 3).
const slowDevices = 3

// slowEngine is the engine of one device, which notes when a container
// is stopped and started. On the simulator (link set) a pull downloads
// the image's bytes through the device's own slow link (resuming with a
// Range request after a reset) before the image is present; on the real
// Podman (link empty) the image's registry is the link itself.
type slowEngine struct {
	runtime.Runtime
	link string
	size int64

	mu             sync.Mutex
	stops, starts  []time.Time
	pulls, fetched atomic.Int64
}

func (s *slowEngine) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	s.pulls.Add(1)
	if s.link != "" {
		n, err := slowlink.Fetch(ctx, s.link, s.size)
		s.fetched.Add(n)
		if err != nil {
			return err
		}
	}
	return s.Runtime.Pull(ctx, ref, auth)
}

func (s *slowEngine) Stop(ctx context.Context, id string, timeout time.Duration) error {
	err := s.Runtime.Stop(ctx, id, timeout)
	s.mu.Lock()
	s.stops = append(s.stops, time.Now())
	s.mu.Unlock()
	return err
}

func (s *slowEngine) Start(ctx context.Context, id string) error {
	err := s.Runtime.Start(ctx, id)
	s.mu.Lock()
	s.starts = append(s.starts, time.Now())
	s.mu.Unlock()
	return err
}

// between is the time the service was between versions in the switch
// after release: its old container stopped → its new one started.
func (s *slowEngine) between(release time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	after := func(ts []time.Time) (time.Time, bool) {
		i := slices.IndexFunc(ts, func(t time.Time) bool { return !t.Before(release) })
		if i < 0 {
			return time.Time{}, false
		}
		return ts[i], true
	}
	stop, ok1 := after(s.stops)
	start, ok2 := after(s.starts)
	if !ok1 || !ok2 {
		return -1
	}
	return start.Sub(stop)
}

// slowRuns numbers the runs of this process (namespaces of their own).
var slowRuns atomic.Int64

// BenchmarkPrefetchRolloutOverASlowLink (issue #37): a Deployment on 3
// devices, each behind its own rate-limited link (internal/slowlink, 1
// MiB/s by default) to a registry serving a 50 MiB image of random bytes,
// rolled out through the real API server, the operator and JetStream to
// real agents (agent.Run) on the simulated engine, whose pulls download
// the image's bytes through the link. Revision 2 waits for a manual
// approval of its one batch; with spec.rollout.prefetch the benchmark
// approves once status.prefetched counts every device (the images
// fetched), without it at once. The release is the approval; the figures
// are release → every device's Converged report and → the Deployment's
// phase Succeeded, and each service's time between versions (old stopped
// → new started). Figures, not assertions:
//
//	go test -tags '…' -run '^$' -bench PrefetchRolloutOverASlowLink -benchtime 1x ./internal/e2e/ [-slowlink.image-mib 50] [-slowlink.rate 1048576] [-slowlink.reset-every 4194304]
func BenchmarkPrefetchRolloutOverASlowLink(b *testing.B) {
	size := int64(*slowImageMiB) << 20
	blob, err := slowlink.ServeBlob(size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = blob.Close() })
	// Connected once: the connection's context ends with the benchmark
	// that made it.
	var pctx context.Context
	if *slowPodman {
		pctx = podmantest.Connect(b)
	}
	for _, prefetch := range []bool{false, true} {
		b.Run(fmt.Sprintf("prefetch=%t", prefetch), func(b *testing.B) {
			for range b.N {
				slowRollout(b, pctx, blob.Addr(), size, prefetch)
			}
		})
	}
}

// slowRollout runs one rollout of revision 2 and reports its figures;
// pctx is the Podman connection's context (nil: every device simulated).
func slowRollout(b *testing.B, pctx context.Context, blobAddr string, size int64, prefetch bool) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	kube := kubeapi.Shared(b)
	nsrv, st := natstest.Provisioned(b)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		b.Fatal(err)
	}
	octx, stopOperator := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() {
		opDone <- operator.Run(octx, operator.Options{RESTConfig: kube.RESTConfig(), Store: st, Reader: st, IntentKV: kv,
			Logger: quietLogger(), StatusInterval: 100 * time.Millisecond, SeveralPerProcess: true})
	}()
	defer func() {
		stopOperator()
		if err := <-opDone; err != nil {
			b.Errorf("operator.Run: %v", err)
		}
	}()
	kubectl := func(stdin string, args ...string) string {
		b.Helper()
		out, err := kube.Kubectl(ctx, []byte(stdin), args...)
		if err != nil {
			b.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	ns := fmt.Sprintf("e2e-slow-%d-%d", os.Getpid(), slowRuns.Add(1))
	kubectl("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n", "apply", "-f", "-")
	defer kubectl("", "delete", "namespace", ns, "--wait=false")

	run := slowRuns.Load()
	service := fmt.Sprintf("slow-%d-%d", os.Getpid(), run)
	oldImage, newImage := "registry.example.com/slow:v1", "registry.example.com/slow:v2"
	creds := slowCreds{}
	var real runtime.Runtime
	var realLink *slowlink.Link
	if pctx != nil {
		// The first device pulls from the test registry through its own
		// link (TLS passes through it: Podman trusts the registry's CA
		// for the link's address too, for the run).
		sock, err := podmantest.SocketPath()
		if err != nil {
			b.Fatal(err)
		}
		reg := podmantest.TestRegistry(b)
		const runs = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
		oldImage = podmantest.BuildImage(b, "slow-runs", runs)
		pushed := podmantest.PushImage(b, reg, fmt.Sprintf("fleet-slow-%d-%d/slow", os.Getpid(), run),
			fmt.Sprintf("FROM %s\nRUN head -c %d /dev/urandom > /slow.bin\n%s", podmantest.BaseImage, size, runs))
		if realLink, err = slowlink.Listen(slowlink.Options{Target: reg.Addr, BytesPerSecond: *slowRate, ResetEvery: *slowReset, Seed: 99}); err != nil {
			b.Fatal(err)
		}
		trustLink(b, reg.CAFile, realLink.Addr())
		newImage = realLink.Addr() + strings.TrimPrefix(pushed, reg.Addr)
		creds["slow-pull"] = fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, realLink.Addr(), reg.Username, reg.Password)
		rt, err := podman.New(pctx, podman.Options{URI: "unix://" + sock})
		if err != nil {
			b.Fatal(err)
		}
		real = rt
		// After the containers' removal (cleanups run last first).
		b.Cleanup(func() { _ = rt.DeleteImage(context.Background(), newImage) })
	} else {
		creds["slow-pull"] = `{"registry":"registry.example.com","username":"u","password":"p"}`
	}
	var devices []string
	engines := map[string]*slowEngine{}
	var wg sync.WaitGroup
	actx, stopAgents := context.WithCancel(ctx)
	defer func() { stopAgents(); wg.Wait() }()
	for i := range slowDevices {
		id := fmt.Sprintf("%s-dev-%d", ns, i+1)
		devices = append(devices, id)
		kubectl(fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: %s, labels: {app: %s}}\nspec: {identitySubject: \"sub-%s\"}\n",
			id, ns, id), "apply", "-n", ns, "-f", "-")
		var eng *slowEngine
		if i == 0 && real != nil {
			eng = &slowEngine{Runtime: real}
			podmantest.RemoveLabelledAtCleanup(b, pctx, agent.LabelDevice, id)
			wg.Go(func() { _ = realLink.Run(actx) })
		} else {
			l, err := slowlink.Listen(slowlink.Options{Target: blobAddr, BytesPerSecond: *slowRate, ResetEvery: *slowReset, Seed: uint64(i + 1)})
			if err != nil {
				b.Fatal(err)
			}
			wg.Go(func() { _ = l.Run(actx) })
			eng = &slowEngine{Runtime: sim.New(sim.Options{LocalImages: []string{oldImage},
				Registry: map[string]sim.RegistryImage{oldImage: {}, newImage: {}}}), link: l.Addr(), size: size}
		}
		engines[id] = eng
		nc, err := nats.Connect(nsrv.ClientURL(), nats.CustomInboxPrefix("_INBOX_"+id))
		if err != nil {
			b.Fatal(err)
		}
		log := quietLogger()
		wg.Go(func() {
			defer nc.Close()
			if err := agent.Run(actx, agent.Options{Device: id, Conn: nc, Logger: log, HeartbeatInterval: time.Minute,
				Reconciler: &agent.Reconciler{Runtime: eng, Log: log, StopTimeout: 10 * time.Second, Credentials: creds}}); err != nil {
				b.Errorf("agent %s: %v", id, err)
			}
		})
	}
	apply := func(image, rollout string) {
		kubectl(fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: slow}
spec:
  targetSelector: {matchLabels: {app: %s}}
  rollout: {%s}
  score: {type: PodmanV0, data: {services: [{name: %s, image: "%s", restart_policy: unless-stopped, image_pull_secret: slow-pull}]}}
`, ns, rollout, service, image), "apply", "-n", ns, "-f", "-")
	}
	apply(oldImage, "")
	kubectl("", "wait", "fdeploy/slow", "-n", ns, "--for=condition=Ready", "--timeout=120s")

	rollout := "batches: [{count: 3}], approval: Manual"
	if prefetch {
		rollout += ", prefetch: true"
	}
	applied := time.Now()
	apply(newImage, rollout)
	kubectl("", "wait", "fdeploy/slow", "-n", ns, "--for=jsonpath={.status.plan.awaitingApproval}=1", "--timeout=60s")
	var fetch time.Duration
	if prefetch {
		kubectl("", "wait", "fdeploy/slow", "-n", ns, fmt.Sprintf("--for=jsonpath={.status.prefetched}=%d", slowDevices), "--timeout=15m")
		fetch = time.Since(applied)
	}
	for id, eng := range engines {
		if n := eng.pulls.Load(); prefetch != (n > 0) {
			b.Fatalf("%s pulled %d times before the release (prefetch %t)", id, n, prefetch)
		}
	}

	b.StartTimer()
	release := time.Now()
	kubectl("", "annotate", "fdeploy/slow", "-n", ns, "--overwrite",
		`fleet.nationtech.io/rollout-action={"action":"approve","generation":2,"batch":1,"by":"e2e","request":"slow-approve-1"}`)
	converged := map[string]time.Duration{}
	if err := testenv.Poll(ctx, 15*time.Minute, func() bool {
		for _, id := range devices {
			if _, ok := converged[id]; ok {
				continue
			}
			subject, _ := events.ReportSubject(id, events.ReportWorkload)
			for rec, err := range st.Replay(ctx, subject, events.FromStart()) {
				if err != nil {
					return false
				}
				if ws, err := events.Decode[events.WorkloadStatus](rec.Event); err == nil && ws.Generation == 2 && ws.Phase == events.WorkloadConverged {
					converged[id] = time.Since(release)
					break
				}
			}
		}
		return len(converged) == len(devices)
	}); err != nil {
		b.Fatalf("not every device converged on revision 2: %v (%v)", err, converged)
	}
	last := time.Since(release)
	kubectl("", "wait", "fdeploy/slow", "-n", ns, "--for=jsonpath={.status.phase}=Succeeded", "--timeout=5m")
	succeeded := time.Since(release)
	b.StopTimer()

	var lines []string
	var maxBetween time.Duration
	for _, id := range devices {
		between := engines[id].between(release)
		maxBetween = max(maxBetween, between)
		how := fmt.Sprintf("simulated, %.1f MiB pulled through its link", float64(engines[id].fetched.Load())/(1<<20))
		if engines[id].link == "" {
			how = "real Podman, pulled from the registry through its link"
		}
		lines = append(lines, fmt.Sprintf("%s (%s): converged %s after the release, between versions %s",
			strings.TrimPrefix(id, ns+"-"), how, converged[id].Round(time.Millisecond), between.Round(100*time.Microsecond)))
	}
	b.Logf("%d devices, %d MiB image, %d B/s per device (reset every %d B), prefetch %t: fetched ahead in %s; release → last Converged %s, → Succeeded %s\n  %s",
		slowDevices, size>>20, *slowRate, *slowReset, prefetch, fetch.Round(time.Millisecond), last.Round(time.Millisecond), succeeded.Round(time.Millisecond),
		strings.Join(lines, "\n  "))
	b.ReportMetric(last.Seconds(), "release-to-converged-s")
	b.ReportMetric(succeeded.Seconds(), "release-to-succeeded-s")
	b.ReportMetric(maxBetween.Seconds(), "max-between-versions-s")
	if prefetch {
		b.ReportMetric(fetch.Seconds(), "fetch-ahead-s")
	}
}

// slowCreds is the devices' pull secrets by reference.
type slowCreds map[string]string

func (c slowCreds) PullCredential(_ context.Context, ref string) ([]byte, error) {
	v, ok := c[ref]
	if !ok {
		return nil, fmt.Errorf("no pull secret %q", ref)
	}
	return []byte(v), nil
}

// trustLink makes Podman trust the test registry's CA (caFile) at addr,
// the address of a link in front of the registry, until the benchmark
// ends: the TLS of the registry passes through the link unchanged, and
// Podman reads the CAs of a registry from
// /etc/containers/certs.d/<host:port>/ at each pull.
func trustLink(b *testing.B, caFile, addr string) {
	b.Helper()
	ca, err := os.ReadFile(caFile)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join("/etc/containers/certs.d", addr)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Skipf("cannot make Podman trust the registry through the link (%v): run with -slowlink.podman=false", err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o644); err != nil {
		b.Fatal(err)
	}
}
