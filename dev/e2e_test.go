package dev_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestDevRollsOutTheExampleToSimulatedDevicesAndResumesAfterARestart is the
// README's run command end to end: the fleet binary's `dev` with simulated
// devices, the documented recipes of docs/fleet.md (kubectl apply and wait,
// the nats replay, fleet history) run after its printed export lines, a
// clean SIGINT stop, and a second run on the same folder that resumes.
func TestDevRollsOutTheExampleToSimulatedDevicesAndResumesAfterARestart(t *testing.T) {
	needKube(t)
	natsBin := natsCLI(t)
	replay := documentedReplay(t)
	recipes := devRecipes(t)
	dir := t.TempDir()
	p := startDev(t, dir, "--devices", "3", "--runtime", "sim")
	for _, want := range []string{"export KUBECONFIG=" + p.in.Kubeconfig, "export NATS_URL=" + p.in.NATSURL,
		"kubectl apply -n lab -f examples/analysis-api.yaml", "kubectl get fdeploy -n lab -w",
		"nats sub --stream FLEET_ROLLOUT --all -T 'fleet.rollout.deployment.lab.analysis-api'",
		"fleet history deployment lab/analysis-api",
		"3 simulated (sim-1 … sim-3) in namespace lab", "(canary=true: sim-1)", "runtime            simulated (--runtime sim)",
		"OpenBao stand-in   http://127.0.0.1:", "root token in " + filepath.Join(dir, "secrets", "openbao.root-token")} {
		if !strings.Contains(p.out, want) {
			t.Errorf("fleet dev output lacks %q:\n%s", want, p.out)
		}
	}
	checkRootToken(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	checkBaoRecipe(t, ctx, p)
	// The metrics fleet dev prints move as the rollout does.
	before := figures(t, ctx, p.in.MetricsURL, "lab", "analysis-api")

	for _, r := range recipes {
		out, err := p.script(ctx, r.script)
		if err != nil {
			t.Fatalf("docs/fleet.md recipe failed: %v\n%s\n%s\nfleet dev's deployments:\n%s\nreports:\n%s", err, r.script, out,
				kubectl(t, ctx, p.in, "get", "fdeploy,fdev", "-n", "lab", "-o", "yaml"),
				natsOut(ctx, natsBin, p.in, "nats sub --stream FLEET_REPORTS --all -T 'fleet.report.*.workload'"))
		}
		for _, want := range r.expect {
			if !strings.Contains(out, want) {
				t.Errorf("recipe\n%s\noutput lacks %q:\n%s", r.script, want, out)
			}
		}
		if strings.Contains(r.script, "lab/canary-demo") {
			checkCanaryFirst(t, out, []string{"sim-1"}, []string{"sim-2", "sim-3"})
		}
	}
	checkRolloutMetrics(t, ctx, p, before)
	// docs/history.md's connecting recipe, after fleet dev's own export line
	// (its documented export line has fleet dev's format).
	hist, histExport := historyRecipe(t)
	if !reNATS.MatchString(histExport) {
		t.Errorf("docs/history.md's export line %q is not the one fleet dev prints", histExport)
	}
	if out, err := p.script(ctx, hist); err != nil || !strings.Contains(out, "Deployment lab/analysis-api") ||
		!strings.Contains(out, "rollout.succeeded") {
		t.Errorf("docs/history.md's recipe %q: %v\n%s", hist, err, out)
	}
	rout, err := natsRun(ctx, natsBin, p.in, replay)
	if err != nil {
		t.Fatalf("%s: %v\n%s", replay, err, rout)
	}
	for _, want := range []string{"rollout.started", "rollout.canary-stage", "rollout.succeeded"} {
		if !strings.Contains(rout, want) {
			t.Errorf("the replay lacks %s:\n%s", want, rout)
		}
	}
	firstToken, err := os.ReadFile(p.in.OpenBaoTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	p.stop(t)
	pw, err := os.ReadFile(p.in.AdminPasswordFile)
	if err != nil {
		t.Fatal(err)
	}

	// The next run resumes: same JetStream store, same etcd data. Auto with
	// a socket that does not answer: simulated devices, and it says why.
	p = startDev(t, dir, "--devices", "3", "--podman-socket", filepath.Join(t.TempDir(), "none.sock"))
	defer p.stop(t)
	if !strings.Contains(p.out, "runtime            simulated (no usable Podman API socket: ") {
		t.Errorf("with no Podman socket, fleet dev does not say why the devices are simulated:\n%s", p.out)
	}
	if tok, err := os.ReadFile(p.in.OpenBaoTokenFile); err != nil || string(tok) == string(firstToken) {
		t.Errorf("the OpenBao stand-in's root token file was not replaced by the new run (%v)", err)
	}
	in := p.in
	if got := kubectl(t, ctx, in, "get", "fdeploy", "-n", "lab", "analysis-api", "-o", "jsonpath={.status.phase}"); got != "Succeeded" {
		t.Errorf("after a restart the Deployment's phase is %q, want Succeeded", got)
	}
	nc, err := nats.Connect(in.NATSURL, nats.UserInfo(in.AdminUser, strings.TrimSpace(string(pw))))
	if err != nil {
		t.Fatalf("after a restart the admin password no longer works: %v", err)
	}
	defer nc.Close()
	st, _ := events.NewStore(nc, events.StoreOptions{})
	rec, err := st.Last(ctx, "fleet.rollout.deployment.lab.analysis-api")
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if rec.Event.Type != events.TypeRolloutSucceeded {
		t.Errorf("after restart the last rollout event is %s, want %s", rec.Event.Type, events.TypeRolloutSucceeded)
	}
	// Devices come back with new keys and report again.
	var online string
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		online = kubectl(t, ctx, in, "get", "fdev", "-n", "lab", "-o", "jsonpath={.items[*].status.liveness}")
		return strings.Count(online, "Online") == 3
	}); err != nil {
		t.Fatalf("devices after a restart (%v): %q, want 3 Online", err, online)
	}
}

// checkRootToken: the stand-in's root token is in a 0600 file and printed
// nowhere.
func checkRootToken(t *testing.T, p *devProc) {
	t.Helper()
	fi, err := os.Stat(p.in.OpenBaoTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", p.in.OpenBaoTokenFile, fi.Mode().Perm())
	}
	tok, err := os.ReadFile(p.in.OpenBaoTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(tok)); len(s) < 16 || strings.Contains(p.out, s) || strings.Contains(p.stderr.String(), s) {
		t.Errorf("the OpenBao root token is short (%d) or printed", len(s))
	}
}

// checkCanaryFirst checks a `fleet history deployment` text output: every
// canary reported Converged before rollout.canaries-converged, which comes
// before rollout.released, and no other target reported before the release.
func checkCanaryFirst(t *testing.T, out string, canaries, others []string) {
	t.Helper()
	_, timeline, ok := strings.Cut(out, "\nTIMELINE\n")
	if !ok {
		t.Fatalf("fleet history printed no TIMELINE:\n%s", out)
	}
	lines := strings.Split(timeline, "\n")
	index := func(match func(string) bool) int {
		for i, l := range lines {
			if match(l) {
				return i
			}
		}
		return -1
	}
	converged := index(func(l string) bool { return strings.Contains(l, "rollout.canaries-converged") })
	released := index(func(l string) bool { return strings.Contains(l, "rollout.released") })
	if converged < 0 || released < converged {
		t.Fatalf("canaries-converged at line %d, released at line %d:\n%s", converged, released, timeline)
	}
	for _, c := range canaries {
		if i := index(func(l string) bool { return strings.Contains(l, c+" reports Converged") }); i < 0 || i > converged {
			t.Errorf("canary %s converged at timeline line %d, after canaries-converged (%d):\n%s", c, i, converged, timeline)
		}
	}
	for _, o := range others {
		if i := index(func(l string) bool { return strings.Contains(l, o+" reports") }); i >= 0 && i < released {
			t.Errorf("non-canary %s reported at timeline line %d, before the release (%d):\n%s", o, i, released, timeline)
		}
	}
}

// TestDevRunsTheExamplesOnAPodmanDeviceWithSecretsFromTheOpenBaoStandIn
// runs `fleet dev --runtime podman` on the repository's Podman service:
// both examples converge on podman-1 (and a simulated device), the init
// container gets the database password from the stand-in, the service
// answers on port 8080, and deleting the Deployments removes the
// containers.
func TestDevRunsTheExamplesOnAPodmanDeviceWithSecretsFromTheOpenBaoStandIn(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	needKube(t)
	natsCLI(t) // the printed steps need it: fail or skip here, not in the middle
	sock, conn, mine := podmanDevice(t)
	p := startDev(t, t.TempDir(), "--devices", "2", "--runtime", "podman", "--podman-socket", sock)
	defer p.stop(t)
	for _, want := range []string{"podman-1 on Podman + 2 simulated in namespace lab", "(canary=true: podman-1, sim-1)",
		"runtime            Podman at unix://" + sock + " for podman-1"} {
		if !strings.Contains(p.out, want) {
			t.Errorf("fleet dev output lacks %q:\n%s", want, p.out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The example's volume under a folder of this test's own, not the
	// /var/tmp/fleet-examples/analysis a developer's fleet dev uses.
	vol := t.TempDir()
	out, err := p.script(ctx, `
sed 's#/var/tmp/fleet-examples/analysis#`+vol+`#' examples/analysis-api.yaml | kubectl apply -n lab -f - -f examples/canary.yaml
kubectl wait -n lab fdeploy/analysis-api fdeploy/canary-demo --for=jsonpath='{.status.phase}'=Succeeded --timeout=3m
fleet history deployment lab/canary-demo`)
	if err != nil {
		t.Fatalf("%v\n%s\n%s\nlogs:\n%s", err, out, kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", "-o", "yaml"), tail(p.stderr.String(), 4000))
	}
	checkCanaryFirst(t, out, []string{"podman-1", "sim-1"}, []string{"sim-2"})
	// Polled: one Podman listing can miss a container while another test
	// process removes its own.
	var got string
	wantCtrs := []string{"analysis-migrate=exited", "analysis-api=running", "canary-hello=running"}
	if err := testenv.Poll(ctx, 30*time.Second, func() bool {
		got = strings.Join(mine(), " ")
		return !slices.ContainsFunc(wantCtrs, func(w string) bool { return !strings.Contains(got, w) })
	}); err != nil {
		t.Errorf("podman-1's containers are %q, want %s among them (%v)", got, wantCtrs, err)
	}
	// The service has the stand-in's demo secret (fleet dev keeps the value
	// in its data folder), which fleet dev never printed.
	want, err := os.ReadFile(filepath.Join(p.dataDir, "secrets", "demo-db.password"))
	if err != nil {
		t.Fatal(err)
	}
	ctr, err := containers.Inspect(conn, "analysis-api", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ctr.Config.Labels["fleet.nationtech.io/device"] != dev.PodmanDevice ||
		!slices.Contains(ctr.Config.Env, "DB_PASSWORD="+strings.TrimSpace(string(want))) {
		t.Errorf("container analysis-api (device %q) lacks DB_PASSWORD from the OpenBao stand-in", ctr.Config.Labels["fleet.nationtech.io/device"])
	}
	if strings.Contains(p.out+p.stderr.String()+out, strings.TrimSpace(string(want))) {
		t.Error("fleet dev or the recipe printed the demo secret's value")
	}
	// The init container exits 2 without DB_PASSWORD; the service serves
	// the migration log it wrote.
	// Converged is a running container, not a listening server: polled.
	var body []byte
	hc := &http.Client{Timeout: 5 * time.Second}
	if err := testenv.PollErr(ctx, 30*time.Second, func() error {
		resp, err := hc.Get("http://127.0.0.1:8080/")
		if err != nil {
			return err
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "migrated") {
			return fmt.Errorf("%s answered %q, want the migration log", resp.Status, body)
		}
		return nil
	}); err != nil {
		t.Errorf("analysis-api on port 8080: %v", err)
	}

	if out, err := p.script(ctx, `kubectl delete -n lab fdeploy analysis-api canary-demo --wait`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var left []string
	if err := testenv.Poll(ctx, 2*time.Minute, func() bool { left = mine(); return len(left) == 0 }); err != nil {
		t.Fatalf("podman-1's containers %v are still there 2 minutes after the Deployments were deleted (%v)", left, err)
	}
}

// historyRecipe returns the commands of docs/history.md's connecting
// recipe (the block that runs fleet history deployment lab/analysis-api)
// without its export line, and that line.
func historyRecipe(t *testing.T) (script, export string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "history.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "fleet history deployment lab/analysis-api") {
			continue
		}
		var cmds []string
		for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
			if strings.HasPrefix(l, "export ") {
				export = l
			} else {
				cmds = append(cmds, l)
			}
		}
		return strings.Join(cmds, "\n"), export
	}
	t.Fatal("docs/history.md lost its connecting recipe (fleet history deployment lab/analysis-api)")
	return "", ""
}

// checkBaoRecipe runs docs/fleet.md's recipe that adds a secret with the
// stand-in's root token (its address and data folder put in), then reads
// the secret back with the token.
func checkBaoRecipe(t *testing.T, ctx context.Context, p *devProc) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	var recipe string
	for _, block := range strings.Split(string(b), "```sh\n")[1:] {
		if block, _, _ = strings.Cut(block, "```"); strings.Contains(block, "openbao.root-token") {
			recipe = block
		}
	}
	if recipe == "" {
		t.Fatal("docs/fleet.md lost its recipe adding a secret to the OpenBao stand-in")
	}
	recipe = strings.NewReplacer("http://127.0.0.1:<port>", p.in.OpenBaoAddr, "~/.cache/fleet-dev", p.dataDir, "…", "added-by-the-recipe").Replace(recipe)
	out, err := p.script(ctx, recipe+`
curl -sf -H "X-Vault-Token: $(cat `+p.in.OpenBaoTokenFile+`)" `+p.in.OpenBaoAddr+`/v1/secret/data/apps/analysis/other`)
	if err != nil || !strings.Contains(out, `"password":"added-by-the-recipe"`) {
		t.Errorf("docs/fleet.md's OpenBao recipe:\n%s\n%v\n%s", recipe, err, out)
	}
}

// checkRolloutMetrics: after the example's rollout, the operator counted its
// revision and transitions, the callout the devices it authorised, and
// every device's agent its passes, each on the endpoint fleet dev printed.
// (A rollout's values reach the agents as stored notifications: the
// direct gets counted are each device's reads at start.)
func checkRolloutMetrics(t *testing.T, ctx context.Context, p *devProc, before rolloutFigures) {
	t.Helper()
	var after rolloutFigures
	err := testenv.Poll(ctx, time.Minute, func() bool {
		after = figures(t, ctx, p.in.MetricsURL, "lab", "analysis-api")
		return after.succeeded >= before.succeeded+1 && after.started >= before.started+1 && after.revisions > before.revisions &&
			after.allowed >= 3 && after.passes > before.passes && after.intentReads >= 3
	})
	if err != nil {
		t.Errorf("fleet dev's metrics did not follow the rollout (%v): before %+v, after %+v", err, before, after)
	}
	for _, dev := range []string{"sim-1", "sim-2", "sim-3"} {
		if n, ok := metricSum(t, ctx, p.in.MetricsURL+"/agents", "fleet_agent_connected", map[string]string{"device": dev}); !ok || n != 1 {
			t.Errorf("fleet_agent_connected{device=%q} = %v (found %v), want 1", dev, n, ok)
		}
	}
}
