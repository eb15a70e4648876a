package dev

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// OpenBao set-up of fleet dev, as docs/agent.md and docs/operator.md
// describe it for a real OpenBao: the JWT auth method trusts the development
// OpenID Provider; one role, OpenBaoRole (the role of device group "lab",
// the group of every dev device), bound to the provider's audience and, as
// an administrator binds a group's role in production, to the subjects of
// the group's devices (bound_claims on sub: each device's machine user id
// is added when it is enrolled, by fleet dev or by `fleet enroll --dev`),
// grants a policy that lets devices read the application secrets under
// apps/. Any other id_token of the provider is refused. Pull
// credentials are granted per Deployment by the operator's policy sync,
// which adds each Deployment's policy to the same role.
const (
	// OpenBaoDevicePolicy is the ACL policy every dev device's role grants.
	OpenBaoDevicePolicy = "fleet-dev-device"
	// DemoSecretPath is the KV v2 secret (relative to the secret/ mount)
	// examples/analysis-api.yaml reads: key password.
	DemoSecretPath = "apps/analysis/db"
	// DemoPullSecret is the device pull credential reference
	// (image_pull_secret) examples/canary.yaml names; its registry is
	// "localhost", the authority of the example images.
	DemoPullSecret = "local"
)

// OpenBaoRole is the JWT auth role every dev device of namespace logs in
// with: the role of its device group "lab" as the operator's policy sync
// names it (operator.DefaultGroupRolePrefix with the namespace, then the
// group: fleet-group-lab-lab), whose token policies the sync maintains.
func OpenBaoRole(namespace string) string {
	return strings.ReplaceAll(operator.DefaultGroupRolePrefix, "{namespace}", namespace) + devGroup
}

// devGroup is the device group of every dev device.
const devGroup = "lab"

// devicePrefix is the KV path of a namespace's device pull credentials.
func devicePrefix(namespace string) string { return "fleet/" + namespace }

// bao is the running OpenBao stand-in and its administrator client.
type bao struct {
	addr      string
	tokenFile string
	admin     *openbao.Client
	srv       *http.Server
}

// startBao serves a new in-memory stand-in on the listen host (port, when
// it is free, else a free one), its address naming the advertised host,
// writes its root token to <secrets>/openbao.root-token (0600, replaced
// every run), and configures it: JWT auth trusting issuer, the device
// policy, the role bound to audience and to no device yet, the demo secrets (random values
// created on the first run in the secrets folder, never printed). Serve it
// with run.
func startBao(ctx context.Context, log *slog.Logger, secretsDir, listen, advertise string, port int, issuer, audience, namespace string) (*bao, error) {
	ln, err := listenPreferring(listen, port, DefaultOpenBaoPort)
	if err != nil {
		return nil, fmt.Errorf("fleet dev: OpenBao stand-in: %w", err)
	}
	noteMoved(log, "OpenBao stand-in", ln, port, DefaultOpenBaoPort)
	s := baostandin.New(baostandin.Options{})
	b := &bao{
		addr: advertisedURL("http", advertise, ln), tokenFile: filepath.Join(secretsDir, "openbao.root-token"),
		srv: &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second},
	}
	go func() { _ = b.srv.Serve(ln) }()
	fail := func(err error) (*bao, error) {
		_ = b.srv.Close()
		return nil, fmt.Errorf("fleet dev: OpenBao stand-in: %w", err)
	}
	if err := writeSecretFile(b.tokenFile, s.RootToken()); err != nil {
		return fail(err)
	}
	if b.admin, err = openbao.NewWithToken(openbao.Config{Address: b.addr}, s.RootToken()); err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.admin.ConfigureJWT(ctx, issuer, ""); err != nil {
		return fail(err)
	}
	policy := fmt.Sprintf("path %q { capabilities = [\"read\"] }\n", "secret/data/apps/*") + exampleDevicePolicy(namespace)
	if err := b.admin.PutPolicy(ctx, OpenBaoDevicePolicy, policy); err != nil {
		return fail(err)
	}
	// No device yet: bindDevice adds each one's subject.
	if err := b.admin.PutJWTRole(ctx, OpenBaoRole(namespace), openbao.JWTRole{
		BoundAudiences: []string{audience}, BoundClaims: map[string][]string{"sub": {}}, Policies: []string{OpenBaoDevicePolicy}, TTL: time.Hour,
	}); err != nil {
		return fail(err)
	}
	// The demo values are random, kept in the secrets folder: the same
	// values every run, so a resumed Podman device keeps its containers.
	dbPassword, err := loadOrCreate(filepath.Join(secretsDir, "demo-db.password"), randomHex)
	if err != nil {
		return fail(err)
	}
	pullPassword, err := loadOrCreate(filepath.Join(secretsDir, "demo-pull.password"), randomHex)
	if err != nil {
		return fail(err)
	}
	if err := b.admin.Write(ctx, DemoSecretPath, map[string]any{"password": dbPassword}); err != nil {
		return fail(err)
	}
	if err := b.admin.Write(ctx, openbao.PullSecretPath(devicePrefix(namespace), DemoPullSecret), map[string]any{
		"registry": "localhost", "username": "fleet-dev", "password": pullPassword,
	}); err != nil {
		return fail(err)
	}
	return b, nil
}

// bindDevice lets the machine user subject log in with OpenBaoRole of
// namespace: it adds subject to the role's bound sub values.
func bindDevice(ctx context.Context, admin *openbao.Client, namespace, subject string) error {
	if err := admin.AddJWTRoleBoundClaimValues(ctx, OpenBaoRole(namespace), "sub", subject); err != nil {
		return fmt.Errorf("fleet dev: OpenBao stand-in: bind subject %s to role %s: %w", subject, OpenBaoRole(namespace), err)
	}
	return nil
}

// BindDevice lets an attached device (the machine user subject, which
// `fleet enroll --dev` enrolled) log in to the OpenBao stand-in of the
// fleet dev of ep with its group's role, ep.OpenBaoRole, as fleet dev's
// own devices do: it adds subject to the role's bound sub values, with the
// stand-in's root token from ep.OpenBaoTokenFile.
func BindDevice(ctx context.Context, ep Endpoints, subject string) error {
	tok, err := os.ReadFile(ep.OpenBaoTokenFile)
	if err != nil {
		return fmt.Errorf("fleet dev: OpenBao stand-in's root token: %w", err)
	}
	admin, err := openbao.NewWithToken(openbao.Config{Address: ep.OpenBaoAddr}, strings.TrimSpace(string(tok)))
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	return bindDevice(ctx, admin, ep.Namespace, subject)
}

// deviceSecrets is a device's secret source: its own client, logging in
// with the device's id_token through OpenBaoRole(namespace).
func (b *bao) deviceSecrets(device, namespace string, idToken func(context.Context) (string, error)) (*openbao.DeviceSecrets, error) {
	c, err := openbao.New(openbao.Config{Address: b.addr, Role: OpenBaoRole(namespace)})
	if err != nil {
		return nil, fmt.Errorf("fleet dev: device %s: %w", device, err)
	}
	ds, err := openbao.NewDeviceSecrets(c, idToken, devicePrefix(namespace))
	if err != nil {
		return nil, fmt.Errorf("fleet dev: device %s: %w", device, err)
	}
	return ds, nil
}

// run waits for ctx to end, then stops the server.
func (b *bao) run(ctx context.Context) error {
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := b.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("OpenBao stand-in: %w", err)
	}
	return nil
}

// writeSecretFile replaces path with value (0600, by an atomic rename).
func writeSecretFile(path, value string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(value+"\n"), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func randomHex() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
