package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

const (
	runsFile  = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
	exit0File = "CMD [\"sh\", \"-c\", \"exit 0\"]\n"
)

func randomHex(t *testing.T) string {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// TestSecretValuesReachOnlyTheContainer runs the agent binary's main path
// against the production chain — machine key → id_token → NATS auth callout,
// and id_token → OpenBao JWT login (the stand-in; see
// dev/baostandin) — on real Podman with the test registry. A
// secret_env value and a device pull credential are resolved and used; then
// every event and KV entry on the server (all streams, with history), every
// label of the device's containers, every log line and every error is
// scanned for the secret values, and none holds one.
func TestSecretValuesReachOnlyTheContainer(t *testing.T) {
	pctx := podmantest.Connect(t)
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	reg := podmantest.TestRegistry(t)
	private := podmantest.PushImage(t, reg, "fleet-agent-test/secret-svc", "FROM "+podmantest.BaseImage+"\n"+runsFile)
	other := podmantest.PushImage(t, reg, "fleet-agent-test/secret-other", "FROM "+podmantest.BaseImage+"\n"+runsFile)
	initImage := podmantest.BuildImage(t, "fleet-agent-test-secret-init", exit0File)

	env := callouttest.Start(t)
	device := "sec-" + randomHex(t)[:8]
	keyFile := env.EnrollDevice(t, device)
	kf, err := credential.ReadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The agent's containers carry the agent's labels, not the test's.
	podmantest.RemoveLabelledAtCleanup(t, pctx, agent.LabelDevice, device)

	// OpenBao as docs/agent.md says to configure it.
	bao := baostandin.Start(t)
	admin, err := openbao.NewWithToken(openbao.Config{Address: bao.URL()}, bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	appSecret := "app-secret-" + randomHex(t)
	wrongPassword := "wrong-password-" + randomHex(t)
	secrets := []string{appSecret, wrongPassword, reg.Password}
	steps := []error{
		admin.ConfigureJWT(ctx, env.Provider.Issuer(), ""),
		admin.PutPolicy(ctx, "fleet-device-"+device, `
path "secret/data/apps/demo/db" { capabilities = ["read"] }
path "secret/data/fleet/lab/registry/device-pull/*" { capabilities = ["read"] }
`),
		admin.PutJWTRole(ctx, "fleet-device", openbao.JWTRole{BoundAudiences: []string{env.Provider.Audience()}, BoundSubject: kf.UserID, Policies: []string{"fleet-device-" + device}, TTL: time.Hour}),
		admin.Write(ctx, "apps/demo/db", map[string]any{"password": appSecret}),
		admin.Write(ctx, "fleet/lab/registry/device-pull/hub", map[string]any{"registry": reg.Addr, "username": reg.Username, "password": reg.Password}),
		admin.Write(ctx, "fleet/lab/registry/device-pull/hub-wrong", map[string]any{"registry": reg.Addr, "username": reg.Username, "password": wrongPassword}),
	}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}

	name := func(n string) string { return n + "-" + device }
	secretEnv := []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "apps/demo/db", Key: "password"}}
	scores := map[string]score.Score{
		"good": {Type: "PodmanV0", Data: score.PodmanV0{
			InitContainer: &score.Service{Name: name("migrate"), Image: initImage, SecretEnv: secretEnv},
			Services:      []score.Service{{Name: name("api"), Image: private, ImagePullSecret: "hub", SecretEnv: secretEnv, RestartPolicy: "unless-stopped"}},
		}},
		"missing-key": {Type: "PodmanV0", Data: score.PodmanV0{Services: []score.Service{{Name: name("mk"), Image: initImage,
			SecretEnv: []score.SecretEnv{{Name: "X", Secret: "apps/demo/db", Key: "no-such-key"}}}}}},
		"wrong-password": {Type: "PodmanV0", Data: score.PodmanV0{Services: []score.Service{{Name: name("wp"), Image: other, ImagePullSecret: "hub-wrong"}}}},
	}
	di := events.DeviceIntent{Device: device}
	for n, s := range scores {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		di.Deployments = append(di.Deployments, events.IntentEntry{Namespace: "lab", Name: n, UID: "u-" + n, Generation: 1, RevisionID: "r1", Score: raw})
	}
	val, _ := json.Marshal(di)
	if _, err := env.Intent.Put(ctx, device, val); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() {
		done <- run(runCtx, []string{"--nats-url", env.NATS.ClientURL(), "--key-file", keyFile, "--runtime", "podman",
			"--podman-socket", "unix://" + sock, "--openbao-url", bao.URL(), "--openbao-device-prefix", "fleet/lab", "--openbao-role", "fleet-device"}, &logs)
	}()

	// Wait for the three outcomes.
	want := map[string]events.WorkloadPhase{"good": events.WorkloadConverged, "missing-key": events.WorkloadFailed, "wrong-password": events.WorkloadFailed}
	got := map[string]events.WorkloadStatus{}
	deadline := time.Now().Add(3 * time.Minute)
	if err := testenv.PollErr(ctx, 3*time.Minute, func() error {
		recs, err := env.Store.LastPerSubject(ctx, "fleet.report."+device+".workload")
		if err == nil && len(recs) > 0 { // none before the agent's first report
			got = map[string]events.WorkloadStatus{}
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			for rec, err := range env.Store.Replay(rctx, "fleet.report."+device+".workload", events.FromStart()) {
				if err != nil {
					break
				}
				ws, _ := events.Decode[events.WorkloadStatus](rec.Event)
				got[ws.Deployment] = ws
				if rec.Sequence >= recs[0].Sequence {
					break
				}
			}
			rcancel()
		}
		ok := true
		for n, ph := range want {
			ok = ok && got[n].Phase == ph
		}
		if ok {
			return nil
		}
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\nlogs:\n%s", err, logs.String())
		default:
		}
		return fmt.Errorf("reports %+v, want %v", got, want)
	}); err != nil {
		t.Fatalf("%v\nlogs:\n%s", err, logs.String())
	}
	if !strings.Contains(got["missing-key"].Error, "no-such-key") || !strings.Contains(got["missing-key"].Error, "apps/demo/db") {
		t.Errorf("missing key error %q does not name the path and key", got["missing-key"].Error)
	}
	if !strings.Contains(strings.ToLower(got["wrong-password"].Error), "auth") {
		t.Errorf("wrong password error %q is not classified as an authentication failure", got["wrong-password"].Error)
	}

	// The value reached the containers' environment.
	for _, c := range []string{name("api"), name("migrate")} {
		data, err := containers.Inspect(pctx, c, nil)
		if err != nil {
			t.Fatalf("inspect %s: %v", c, err)
		}
		if !slices.Contains(data.Config.Env, "DB_PASSWORD="+appSecret) {
			t.Errorf("%s: DB_PASSWORD is not the resolved secret", c)
		}
		if strings.Contains(strings.Join(data.Config.Env, "\n"), reg.Password) {
			t.Errorf("%s: the pull password reached the container's environment", c)
		}
	}

	// Rotation: the agent does not watch OpenBao, so nothing changes until
	// a reconcile; reconcile-now re-resolves, and the changed value is a new
	// score revision: the init container reruns and the service is replaced.
	inspectID := func(c string) (string, []string) {
		data, err := containers.Inspect(pctx, c, nil)
		if err != nil {
			return "", nil // being replaced
		}
		return data.ID, data.Config.Env
	}
	apiBefore, _ := inspectID(name("api"))
	initBefore, _ := inspectID(name("migrate"))
	rotated := "app-secret-rotated-" + randomHex(t)
	secrets = append(secrets, rotated)
	if err := admin.Write(ctx, "apps/demo/db", map[string]any{"password": rotated}); err != nil {
		t.Fatal(err)
	}
	cmd, err := events.New(events.Keys{Device: device}, events.AgentCommand{Command: agent.CommandReconcileNow, RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Store.Append(ctx, cmd); err != nil {
		t.Fatal(err)
	}
	// The rest of the three minutes the first wait began.
	if err := testenv.PollErr(ctx, time.Until(deadline).Truncate(time.Second), func() error {
		apiID, apiEnv := inspectID(name("api"))
		initID, initEnv := inspectID(name("migrate"))
		if apiID != "" && initID != "" && apiID != apiBefore && initID != initBefore && slices.Contains(apiEnv, "DB_PASSWORD="+rotated) && slices.Contains(initEnv, "DB_PASSWORD="+rotated) {
			return nil
		}
		return fmt.Errorf("service replaced: %v, init rerun: %v", apiID != apiBefore, initID != initBefore)
	}); err != nil {
		t.Fatalf("the rotated secret was not applied after reconcile-now: %v\nlogs:\n%s", err, logs.String())
	}

	stop()
	runErr := <-done

	// Scan everything else.
	var leaks []string
	scan := func(where, text string) {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				leaks = append(leaks, where)
			}
		}
	}
	if runErr != nil {
		scan("the agent's returned error", runErr.Error())
	}
	scan("the agent's log", logs.String())
	for n, ws := range got {
		scan("report error of "+n, ws.Error)
	}
	scanStreams(t, ctx, env.Store.JetStream(), scan)
	list, err := containers.List(pctx, &containers.ListOptions{All: boolPtr(true), Filters: map[string][]string{"label": {agent.LabelDevice + "=" + device}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) < 2 {
		t.Fatalf("found %d containers of the device, want the init container and the service", len(list))
	}
	for _, c := range list {
		data, err := containers.Inspect(pctx, c.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range data.Config.Labels {
			scan(fmt.Sprintf("label %s of %s", k, c.Names), k+"="+v)
		}
		scan("name of "+c.ID, strings.Join(c.Names, ","))
	}
	if len(leaks) > 0 {
		t.Fatalf("secret values found in: %v", leaks)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
}

// scanStreams reads every message of every stream on the server (events,
// KV buckets with their history, object stores) and scans subject,
// headers and payload.
func scanStreams(t *testing.T, ctx context.Context, js jetstream.JetStream, scan func(where, text string)) {
	t.Helper()
	names := js.StreamNames(ctx)
	n := 0
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("%s seq %d: %v", name, seq, err)
			}
			n++
			where := fmt.Sprintf("stream %s seq %d (%s)", name, seq, m.Subject)
			scan(where, m.Subject)
			scan(where, string(m.Data))
			for k, vs := range m.Header {
				scan(where, k+": "+strings.Join(vs, ","))
			}
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("the scan read no message: it cannot find anything")
	}
	t.Logf("scanned %d stored messages", n)
}

func boolPtr(b bool) *bool { return &b }
