package dev

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// fleet dev offers `harmony ship` what CI has: the registry `task
// setup:podman` runs (TLS, trusted by buildah and Podman through
// /etc/containers/certs.d), a CI machine user at the development provider
// whose key is in <data>/secrets/harmony-ci.key.json, the OpenBao
// stand-in's JWT role for it (docs/ci.md, "Setting up OpenBao for a
// tenant") and, at the KV paths harmony reads, the push robot and a
// kubeconfig of a service account that may only get, create and patch Fleet
// Deployments of the namespace. The reference program
// (examples/harmony_apply_deployment) compiles in a "dev" context naming
// the default addresses below; fleet dev prints the build command, with
// -ldflags -X for every address that differs on this run.

// Default ports of the development OpenID Provider and the OpenBao
// stand-in: the reference program's dev context names them. fleet dev takes
// the previous run's ports first (an attached device keeps its URLs), then
// these, then any free one.
const (
	DefaultProviderPort = 8180
	DefaultOpenBaoPort  = 8200
)

// Defaults of the reference program's dev context, as compiled in
// (examples/harmony_apply_deployment; a test checks they agree).
const (
	// DefaultShipIssuer is the dev context's Zitadel URL.
	DefaultShipIssuer = "http://127.0.0.1:8180"
	// DefaultShipOpenBao is the dev context's OpenBao URL.
	DefaultShipOpenBao = "http://127.0.0.1:8200"
	// DefaultShipRegistry is the dev context's registry: the address `task
	// setup:podman` gives its registry unless another checkout holds it.
	DefaultShipRegistry = "127.0.0.1:5000"
	// DefaultShipNamespace is the dev context's namespace: fleet dev's
	// default --namespace.
	DefaultShipNamespace = "lab"
)

// What fleet dev sets up for the reference program.
const (
	// ShipContext is the reference program's context for fleet dev.
	ShipContext = "dev"
	// ShipRole is the JWT auth role (and its policy) of the CI identity
	// at the stand-in, and the name of its machine user, service
	// account, Role and RoleBinding.
	ShipRole = "harmony-ci"
	// ShipKeyFileName is the CI machine key's file in <data>/secrets
	// (mode 0600, a new key every run).
	ShipKeyFileName = "harmony-ci.key.json"
	// ShipProgram is the reference program, relative to the repository
	// root.
	ShipProgram = "./examples/harmony_apply_deployment"
	// ExampleGroup is the reference program's allowedGroups entry: every
	// device of the namespace is in it too.
	ExampleGroup = "example-edge"
	// ExampleLabel is the reference program's placement: every dev
	// device carries it.
	ExampleLabel = "app"
	// ExampleLabelValue is ExampleLabel's value.
	ExampleLabelValue = "example"
	// ExamplePullSecret is the reference program's image_pull_secret.
	ExamplePullSecret = "example-pull"
	// ExampleSecretPath is the reference program's secret_env secret
	// (key api_token), relative to the secret/ mount.
	ExampleSecretPath = "example/backend"
)

// ShipKeyVariable is the variable harmony reads the machine key from.
const ShipKeyVariable = "HARMONY_ZITADEL_KEY_JSON"

// Ship is what fleet dev offers `harmony ship`, as it prints it.
type Ship struct {
	// Registry is the registry authority images are pushed to; "" when
	// fleet dev offers no ship, and then Note says why.
	Registry, Note string
	// KeyFile holds the CI machine key JSON (mode 0600, never printed).
	KeyFile string
	// Build is the command that builds the reference program into
	// <data>/bin/harmony, with the -ldflags this run's addresses need.
	Build string
	// Export is the one line putting the key into ShipKeyVariable.
	Export string
	// Command runs the ship from the repository root.
	Command string
}

// shipRegistry is the registry of `task setup:podman`.
type shipRegistry struct {
	addr, user, password string
}

// RegistryEnvVariables name the test registry's address, user and
// password, as <repository>/.cache/run/registry.env holds them: when all
// three are set in fleet dev's environment they are used instead of that
// file (a user who cannot read it, the setup having been run by root,
// exports them).
var RegistryEnvVariables = [3]string{"FLEET_TEST_REGISTRY", "FLEET_TEST_REGISTRY_USER", "FLEET_TEST_REGISTRY_PASSWORD"}

// findShipRegistry reads <repository>/.cache/run/registry.env (or the
// RegistryEnvVariables) and checks that the registry answers over TLS (its
// CA) with its credentials.
func findShipRegistry(ctx context.Context) (shipRegistry, error) {
	root, err := repoRoot()
	if err != nil {
		return shipRegistry{}, err
	}
	run := filepath.Join(root, ".cache", "run")
	var data []byte
	if a, u, p := os.Getenv(RegistryEnvVariables[0]), os.Getenv(RegistryEnvVariables[1]), os.Getenv(RegistryEnvVariables[2]); a != "" && u != "" && p != "" {
		data = []byte(RegistryEnvVariables[0] + "=" + a + "\n" + RegistryEnvVariables[1] + "=" + u + "\n" + RegistryEnvVariables[2] + "=" + p + "\n")
	} else if data, err = os.ReadFile(filepath.Join(run, "registry.env")); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return shipRegistry{}, fmt.Errorf("no registry credentials: %w (the setup ran as another user: export %s, %s and %s from it, or run `%s` as yourself)",
				err, RegistryEnvVariables[0], RegistryEnvVariables[1], RegistryEnvVariables[2], SetupPodmanCommand)
		}
		return shipRegistry{}, fmt.Errorf("no registry credentials: %w", err)
	}
	var r shipRegistry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch k {
		case "FLEET_TEST_REGISTRY":
			r.addr = v
		case "FLEET_TEST_REGISTRY_USER":
			r.user = v
		case "FLEET_TEST_REGISTRY_PASSWORD":
			r.password = v
		}
	}
	if r.addr == "" || r.user == "" || r.password == "" {
		return shipRegistry{}, fmt.Errorf("%s lacks the address, user or password", filepath.Join(run, "registry.env"))
	}
	ca, err := os.ReadFile(filepath.Join(run, "registry", "ca.crt"))
	if err != nil {
		return shipRegistry{}, fmt.Errorf("registry CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return shipRegistry{}, fmt.Errorf("%s holds no certificate", filepath.Join(run, "registry", "ca.crt"))
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.addr+"/v2/", nil)
	if err != nil {
		return shipRegistry{}, fmt.Errorf("registry %s: %w", r.addr, err)
	}
	req.SetBasicAuth(r.user, r.password)
	resp, err := hc.Do(req)
	if err != nil {
		return shipRegistry{}, fmt.Errorf("registry %s does not answer: %w", r.addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return shipRegistry{}, fmt.Errorf("registry %s answers %s to its credentials", r.addr, resp.Status)
	}
	return r, nil
}

// exampleDevicePolicy is the part of OpenBaoDevicePolicy that lets dev
// devices read what the reference program's Deployment references: its
// pull secret and its application secret. A dev device logs in with the
// role of group "lab" only, so the pull-secret policy the operator binds to
// the example's group role would not reach it; fleet dev grants both
// paths to every device instead.
func exampleDevicePolicy(namespace string) string {
	return fmt.Sprintf("path %q { capabilities = [\"read\"] }\npath %q { capabilities = [\"read\"] }\n",
		"secret/data/"+openbao.PullSecretPath(devicePrefix(namespace), ExamplePullSecret), "secret/data/"+ExampleSecretPath)
}

// shipPath is a KV path of the dev context's CI secrets (harmony's
// defaults: harmony/<namespace>/<context>/<name>).
func shipPath(namespace, name string) string {
	return "harmony/" + namespace + "/" + ShipContext + "/" + name
}

// setupShip gives the reference program's dev context what CI gives it
// (see above). Without a registry it only notes why in s.ship. It runs
// before the operator starts, so the example group's role exists when the
// policy sync first looks.
func (s *session) setupShip(ctx context.Context) error {
	ns, op, admin := s.o.Namespace, s.plane.Provider(), s.bs.admin
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The example group's role: the operator binds the example's
	// pull-secret policy to it (PolicySynced). No dev device logs in with
	// it (each uses OpenBaoRole), so it is bound to no subject: it refuses
	// every id_token, as an unused group's role should.
	if err := admin.PutJWTRole(ctx, strings.ReplaceAll(operator.DefaultGroupRolePrefix, "{namespace}", ns)+ExampleGroup, openbao.JWTRole{
		BoundAudiences: []string{op.Audience()}, BoundClaims: map[string][]string{"sub": {}}, Policies: []string{OpenBaoDevicePolicy}, TTL: time.Hour,
	}); err != nil {
		return fmt.Errorf("fleet dev: OpenBao stand-in: role of group %s: %w", ExampleGroup, err)
	}
	reg, err := findShipRegistry(ctx)
	if err != nil {
		s.ship = Ship{Note: fmt.Sprintf("no registry to push to (%v): run `%s` in the repository, then start fleet dev again", err, SetupPodmanCommand)}
		s.log.Info("harmony ship is not offered", "reason", err)
		return nil
	}
	kubeconfig, err := s.shipKubeconfig(ctx)
	if err != nil {
		return err
	}
	uid, err := op.CreateMachineUser(ctx, ShipRole)
	if err != nil {
		return fmt.Errorf("fleet dev: CI machine user: %w", err)
	}
	key, err := op.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		return fmt.Errorf("fleet dev: CI machine key: %w", err)
	}
	kb, err := key.Marshal()
	if err != nil {
		return fmt.Errorf("fleet dev: CI machine key: %w", err)
	}
	keyFile := filepath.Join(s.sec.dir, ShipKeyFileName)
	if err := writeSecretFile(keyFile, string(kb)); err != nil {
		return fmt.Errorf("fleet dev: CI machine key: %w: check that --data-dir is writable", err)
	}
	apiToken, err := loadOrCreate(filepath.Join(s.sec.dir, "example-api.token"), randomHex)
	if err != nil {
		return err
	}
	policy := fmt.Sprintf("path %q { capabilities = [\"read\"] }\n", "secret/data/"+shipPath(ns, "*")) + shipTransitPolicy(ns)
	creds := map[string]any{"registry": reg.addr, "username": reg.user, "password": reg.password}
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"CI policy", func() error { return admin.PutPolicy(ctx, ShipRole, policy) }},
		{"CI role", func() error {
			return admin.PutJWTRole(ctx, ShipRole, openbao.JWTRole{BoundAudiences: []string{op.Audience()}, BoundSubject: uid,
				Policies: []string{ShipRole}, TTL: 15 * time.Minute})
		}},
		{"push robot", func() error { return admin.Write(ctx, shipPath(ns, "RegistryCredentials"), creds) }},
		{"CI kubeconfig", func() error {
			return admin.Write(ctx, shipPath(ns, "kubeconfig"), map[string]any{"kubeconfig": string(kubeconfig)})
		}},
		// The registry has one account: it pulls too.
		{"example pull secret", func() error {
			return admin.Write(ctx, openbao.PullSecretPath(devicePrefix(ns), ExamplePullSecret), creds)
		}},
		{"example application secret", func() error { return admin.Write(ctx, ExampleSecretPath, map[string]any{"api_token": apiToken}) }},
	} {
		if err := step.do(); err != nil {
			return fmt.Errorf("fleet dev: OpenBao stand-in: %s: %w", step.what, err)
		}
	}
	if err := s.shipSigningKey(ctx); err != nil {
		return err
	}
	s.ship = Ship{Registry: reg.addr, KeyFile: keyFile,
		Build:   shipBuild(filepath.Join(s.bins.path, "harmony"), op.Issuer(), s.bs.addr, reg.addr, ns),
		Export:  fmt.Sprintf("export %s=\"$(cat %s)\"", ShipKeyVariable, keyFile),
		Command: fmt.Sprintf("cd %s && harmony ship --context %s --tag t1 --wait", strings.TrimPrefix(ShipProgram, "./"), ShipContext),
	}
	return nil
}

// shipBuild is the go build command of the reference program, with -X for
// every address of the dev context that is not its compiled default, and
// the build tag a harmony program needs (containers/image's signing code
// without GPGME, docs/ci.md).
func shipBuild(out, issuer, baoAddr, registry, namespace string) string {
	var x []string
	for _, v := range []struct{ name, got, def string }{
		{"devZitadel", issuer, DefaultShipIssuer},
		{"devOpenBao", baoAddr, DefaultShipOpenBao},
		{"devRegistry", registry, DefaultShipRegistry},
		{"devNamespace", namespace, DefaultShipNamespace},
	} {
		if v.got != v.def {
			x = append(x, "-X main."+v.name+"="+v.got)
		}
	}
	flags := " -tags " + HarmonyBuildTags
	if len(x) > 0 {
		flags += fmt.Sprintf(" -ldflags \"%s\"", strings.Join(x, " "))
	}
	return fmt.Sprintf("go build%s -o %s %s", flags, out, ShipProgram)
}

// shipKubeconfig makes the CI identity's cluster access: service account
// ShipRole in the namespace, allowed to get, create and patch Fleet
// Deployments there (docs/ci.md), and a kubeconfig with a token of it.
func (s *session) shipKubeconfig(ctx context.Context) ([]byte, error) {
	ns := s.o.Namespace
	scheme := apiruntime.NewScheme()
	for _, add := range []func(*apiruntime.Scheme) error{corev1.AddToScheme, rbacv1.AddToScheme, authenticationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("fleet dev: scheme: %w", err)
		}
	}
	c, err := client.New(s.k.cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("fleet dev: kubernetes client: %w", err)
	}
	meta := metav1.ObjectMeta{Name: ShipRole, Namespace: ns}
	sa := &corev1.ServiceAccount{ObjectMeta: meta}
	role := &rbacv1.Role{ObjectMeta: meta, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"fleet.nationtech.io"}, Resources: []string{"deployments"}, Verbs: []string{"get", "create", "patch"},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: ShipRole},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: ShipRole, Namespace: ns}}}
	for _, obj := range []client.Object{sa, role, binding} {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("fleet dev: CI access: create %T %s/%s: %w", obj, ns, ShipRole, err)
		}
	}
	// The stored Role may be an older run's: make its rules these.
	cur := &rbacv1.Role{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(role), cur); err != nil {
		return nil, fmt.Errorf("fleet dev: CI access: read Role %s/%s: %w", ns, ShipRole, err)
	}
	cur.Rules = role.Rules
	if err := c.Update(ctx, cur); err != nil {
		return nil, fmt.Errorf("fleet dev: CI access: update Role %s/%s: %w", ns, ShipRole, err)
	}
	week := int64((7 * 24 * time.Hour).Seconds())
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &week}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		return nil, fmt.Errorf("fleet dev: CI access: token of service account %s/%s: %w", ns, ShipRole, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["fleet-dev"] = &clientcmdapi.Cluster{Server: s.k.cfg.Host, CertificateAuthorityData: s.k.cfg.CAData}
	cfg.AuthInfos[ShipRole] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["fleet-dev"] = &clientcmdapi.Context{Cluster: "fleet-dev", AuthInfo: ShipRole, Namespace: ns}
	cfg.CurrentContext = "fleet-dev"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("fleet dev: CI kubeconfig: %w", err)
	}
	return b, nil
}

// shipSection is the printed paragraph on shipping as CI would.
func shipSection(in Info) string {
	sh := in.Ship
	var b strings.Builder
	if sh.Registry == "" {
		if sh.Note != "" {
			fmt.Fprintf(&b, "Ship as CI would (docs/fleet.md, \"Ship from a laptop as CI would\"): not offered: %s\n", sh.Note)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "Ship as CI would (docs/fleet.md, \"Ship from a laptop as CI would\"; needs buildah), from the repository root:\n")
	fmt.Fprintf(&b, "  %s\n  %s\n  %s\n", sh.Build, sh.Export, sh.Command)
	fmt.Fprintf(&b, "  # pushes to %s; the CI machine key is new every run: export it again after a restart\n", sh.Registry)
	return b.String()
}
