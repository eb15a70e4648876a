package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/enroll"
	"github.com/nationtech/harmony-fleet/identity/zitadel"
	"github.com/nationtech/harmony-fleet/internal/gitwork"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

const enrollUsage = `usage: fleet enroll [flags] <device>

Mints a machine user and key at the identity provider (Zitadel, or the
development provider of fleet dev), creates the Device resource with its
identity subject and writes the key file (mode 0600) for the device.

  fleet enroll edge-1                                  enroll a new device
  fleet enroll --reenroll --overwrite edge-1           new key, old keys removed
  fleet enroll --revoke edge-1                         remove every key, quarantine

The key file is the device's private key. Without -key-file it is written
to $XDG_CONFIG_HOME/fleet/keys/<namespace>/<device>.key.json
(~/.config/fleet/keys/..., folder mode 0700); with -dev to
<data-dir>/devices/<device>.key.json. A -key-file inside a git work tree
that does not ignore it is refused (a "git add" would commit the key):
choose a path outside, or one its .gitignore covers, or pass -allow-in-git.

Against a running fleet dev, -dev reads the kubeconfig, the provider, its
token, the namespace and the URLs from fleet dev's data folder, lets the
device's id_token log in to the OpenBao stand-in's role of its group, waits
until the operator registered the device, and prints the fleet-agent
command line and the systemd settings for the device:

  fleet enroll --dev --label board=rpi pi-1
  fleet enroll --dev --reenroll --overwrite pi-1       after fleet dev lost its state

flags:
`

// Where fleet-agent finds its key and the Podman socket on a device, unless
// -agent-key-file and -agent-podman-socket say otherwise:
// deploy/systemd/fleet-agent.service's FLEET_KEY_FILE, and the rootless
// Podman socket of the user that runs the agent.
const (
	unitKeyFile         = "/etc/fleet-agent/key.json"
	defaultDevicePodman = "unix://$XDG_RUNTIME_DIR/podman/podman.sock"
)

// labelsFlag is a repeatable key=value flag.
type labelsFlag map[string]string

func (l labelsFlag) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelsFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	switch {
	case !ok || k == "":
		return fmt.Errorf("%q: use key=value", v)
	case k == v1alpha1.LabelBlacklist:
		return fmt.Errorf("%q: %s quarantines a device: use -revoke", v, v1alpha1.LabelBlacklist)
	case strings.HasPrefix(k, v1alpha1.ReservedLabelPrefix):
		return fmt.Errorf("%q: labels under %s are the control plane's", v, v1alpha1.ReservedLabelPrefix)
	}
	l[k] = val
	return nil
}

// enrollFlags are `fleet enroll`'s flags.
type enrollFlags struct {
	keyFile, namespace, kubeconfig, idpURL, idpTokenFile, orgID, issuer, audience string
	overwrite, reenroll, revoke, verbose, allowInGit                              bool
	keyExpiry                                                                     time.Duration
	labels                                                                        labelsFlag
	// dev: defaults from a running fleet dev's data folder.
	dev                                bool
	dataDir, agentKeyFile, agentPodman string
	// set are the flags given on the command line.
	set map[string]bool
}

// runEnroll is `fleet enroll`.
func runEnroll(args []string) error {
	fs := flag.NewFlagSet("fleet enroll", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), enrollUsage)
		fs.PrintDefaults()
	}
	f := enrollFlags{labels: labelsFlag{}, set: map[string]bool{}}
	fs.StringVar(&f.keyFile, "key-file", "", "where the device's machine key file is written (mode 0600; default $XDG_CONFIG_HOME/fleet/keys/<namespace>/<device>.key.json, with -dev <data-dir>/devices/<device>.key.json)")
	fs.BoolVar(&f.allowInGit, "allow-in-git", false, "write the key file even inside a git work tree that does not ignore it")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace an existing key file")
	fs.BoolVar(&f.reenroll, "reenroll", false, "mint a new key for an enrolled device and remove its old keys")
	fs.BoolVar(&f.revoke, "revoke", false, "remove every key of the device and quarantine it (label blacklist=true)")
	fs.StringVar(&f.namespace, "namespace", "default", "namespace of the Device resource (with -dev: fleet dev's)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config; with -dev: fleet dev's)")
	fs.StringVar(&f.idpURL, "idp-url", os.Getenv("FLEET_IDP_URL"), "identity provider URL (Zitadel instance or fleet dev's provider; env FLEET_IDP_URL; with -dev: fleet dev's)")
	fs.StringVar(&f.idpTokenFile, "idp-token-file", os.Getenv("FLEET_IDP_TOKEN_FILE"), "file holding a personal access token allowed to manage machine users (env FLEET_IDP_TOKEN_FILE; with -dev: fleet dev's)")
	fs.StringVar(&f.orgID, "org-id", "", "Zitadel organisation id (x-zitadel-orgid)")
	fs.DurationVar(&f.keyExpiry, "key-expiry", 0, "key lifetime (0: no expiry)")
	fs.StringVar(&f.issuer, "issuer", "", "OpenID issuer written into the key file for the device (default: -idp-url)")
	fs.StringVar(&f.audience, "audience", "", "id_token audience written into the key file for the device (with -dev: fleet dev's)")
	fs.Var(f.labels, "label", "label key=value of the new Device resource (repeatable), e.g. board=rpi, for the targetSelector of Deployments meant for it")
	fs.BoolVar(&f.dev, "dev", false, "enroll at the fleet dev running on -data-dir: its kubeconfig, provider, namespace and URLs; print the device's fleet-agent command line")
	fs.StringVar(&f.dataDir, "data-dir", dev.DefaultDataDir(), "fleet dev's data folder (with -dev)")
	fs.StringVar(&f.agentKeyFile, "agent-key-file", unitKeyFile, "where the key file will be on the device, for the printed fleet-agent command line (with -dev)")
	fs.StringVar(&f.agentPodman, "agent-podman-socket", defaultDevicePodman, "the Podman API socket on the device, for the printed fleet-agent command line (with -dev)")
	fs.BoolVar(&f.verbose, "v", false, "log each step")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("enroll: give exactly one device id")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return enrollDevice(ctx, os.Stdout, f, fs.Arg(0))
}

// devDefaults fills what -dev reads from fleet dev's data folder; flags
// given on the command line win, but for the namespace, which must be
// fleet dev's.
func (f *enrollFlags) devDefaults() (dev.Endpoints, error) {
	for _, name := range []string{"data-dir", "agent-key-file", "agent-podman-socket"} {
		if f.set[name] && !f.dev {
			return dev.Endpoints{}, fmt.Errorf("enroll: -%s is for -dev: add -dev, or leave it out", name)
		}
	}
	if !f.dev {
		return dev.Endpoints{}, nil
	}
	ep, err := dev.ReadEndpoints(f.dataDir)
	if err != nil {
		return ep, fmt.Errorf("enroll: -dev: %w", err)
	}
	if f.set["namespace"] && f.namespace != ep.Namespace {
		return ep, fmt.Errorf("enroll: -namespace %s: the fleet dev on -data-dir %s runs namespace %s: leave -namespace out", f.namespace, f.dataDir, ep.Namespace)
	}
	f.namespace = ep.Namespace
	if !f.set["kubeconfig"] {
		f.kubeconfig = ep.Kubeconfig
	}
	if !f.set["idp-url"] {
		f.idpURL = ep.Issuer
	}
	if !f.set["idp-token-file"] {
		f.idpTokenFile = ep.IDPTokenFile
	}
	if !f.set["issuer"] {
		f.issuer = ep.Issuer
	}
	if !f.set["audience"] {
		f.audience = ep.Audience
	}
	if !f.set["agent-podman-socket"] && ep.PodmanSocket != "" && loopbackOnly(ep) {
		// Only a device on this machine can reach a fleet dev on
		// loopback: the socket fleet dev drives is right for it (and a
		// root user's $XDG_RUNTIME_DIR is empty).
		f.agentPodman = ep.PodmanSocket
	}
	return ep, nil
}

// check refuses contradicting or missing flags.
func (f *enrollFlags) check() error {
	switch {
	case f.reenroll && f.revoke:
		return errors.New("enroll: --reenroll and --revoke exclude each other")
	case len(f.labels) > 0 && (f.reenroll || f.revoke):
		return errors.New("enroll: -label sets the labels of a new Device only: change an enrolled one's with kubectl label")
	case f.idpURL == "" || f.idpTokenFile == "":
		return errors.New("enroll: -idp-url and -idp-token-file are required (or -dev, with fleet dev running)")
	}
	return nil
}

// keyPath returns where device's key file goes: -key-file, else the
// default folder (with -dev fleet dev's <data-dir>/devices, else the
// user's config folder's fleet/keys/<namespace>). It makes the file's
// folder (mode 0700) when missing, and refuses a path inside a git work
// tree that does not ignore it unless -allow-in-git.
func (f *enrollFlags) keyPath(ctx context.Context, device string) (string, error) {
	path := f.keyFile
	if path == "" {
		dir, err := f.defaultKeyDir()
		if err != nil {
			return "", err
		}
		path = filepath.Join(dir, device+".key.json")
	}
	if !f.allowInGit {
		root, err := gitwork.Unignored(ctx, path)
		if root != "" {
			why := ""
			if err != nil {
				why = fmt.Sprintf(" (git could not check its ignore files: %v)", err)
			}
			what, fix := "-key-file "+path, "leave -key-file out (its default is outside the repository), give"
			if f.keyFile == "" {
				what, fix = "the key file's default path "+path+" (no -key-file given)", "give -key-file with"
			}
			return "", fmt.Errorf("enroll: %s is inside the git work tree %s, which does not ignore it%s: "+
				"a \"git add\" would commit the device's private key; %s a path outside the work tree or one its .gitignore covers, "+
				"or pass -allow-in-git to write it there anyway", what, root, why, fix)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("enroll: -key-file %s: make its folder: %w", path, err)
	}
	return path, nil
}

// checkBindable refuses, before anything is enrolled, a fleet dev whose
// OpenBao stand-in's root token cannot be read (a fleet dev older than
// endpoints' openbaoTokenFile, or its file gone): dev.BindDevice needs
// it after the enrollment, and without it the device would stay enrolled
// with no role to read its secrets.
func (f *enrollFlags) checkBindable(ep dev.Endpoints) error {
	fix := fmt.Sprintf("restart fleet dev (`fleet dev --data-dir %s`), then enroll again "+
		"(pass --reenroll for a device enrolled already)", f.dataDir)
	if ep.OpenBaoTokenFile == "" {
		return fmt.Errorf("enroll: -dev: the fleet dev on -data-dir %s (process %d) names no OpenBao stand-in root token in its %s "+
			"(it is older than this fleet), so the device could not be bound to its role %s: %s",
			f.dataDir, ep.PID, dev.EndpointsFile, ep.OpenBaoRole, fix)
	}
	if _, err := os.ReadFile(ep.OpenBaoTokenFile); err != nil {
		return fmt.Errorf("enroll: -dev: the OpenBao stand-in's root token: %w, so the device could not be bound to its role %s: %s",
			err, ep.OpenBaoRole, fix)
	}
	return nil
}

// defaultKeyDir is the folder of key files without -key-file: with -dev
// <data-dir>/devices (where fleet dev keeps its own devices' keys), else
// <user config folder>/fleet/keys/<namespace>.
func (f *enrollFlags) defaultKeyDir() (string, error) {
	if f.dev {
		return filepath.Join(f.dataDir, "devices"), nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("enroll: no folder for the key file (%w): pass -key-file", err)
	}
	return filepath.Join(dir, "fleet", "keys", f.namespace), nil
}

// enrollDevice enrolls, re-enrolls or revokes device as the flags say, and
// prints the result (with -dev, the device's agent settings) to out.
func enrollDevice(ctx context.Context, out io.Writer, f enrollFlags, device string) error {
	ep, err := f.devDefaults()
	if err != nil {
		return err
	}
	if err := f.check(); err != nil {
		return err
	}
	if f.dev && !f.revoke {
		if err := f.checkBindable(ep); err != nil {
			return err
		}
	}
	if !f.revoke {
		if f.keyFile, err = f.keyPath(ctx, device); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(f.idpTokenFile)
	if err != nil {
		return fmt.Errorf("enroll: read -idp-token-file: %w", err)
	}
	idp, err := zitadel.New(zitadel.Options{BaseURL: f.idpURL, Token: strings.TrimSpace(string(tok)), OrgID: f.orgID})
	if err != nil {
		return err
	}
	kc, err := kubeClient(f.kubeconfig)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	en, err := enroll.New(enroll.Options{
		Client: kc, Provider: idp, Namespace: f.namespace, KeyExpiry: f.keyExpiry, Issuer: cmp.Or(f.issuer, f.idpURL), Audience: f.audience,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	req := enroll.Request{Device: device, KeyFile: f.keyFile, Overwrite: f.overwrite, Labels: f.labels}
	var res enroll.Result
	switch {
	case f.revoke:
		if res, err = en.Revoke(ctx, device); err != nil {
			return err
		}
		fmt.Fprintf(out, "revoked device %s (subject %s): %d key(s) removed, Device labelled %s=true\n", res.Device, res.Subject, len(res.Revoked), v1alpha1.LabelBlacklist)
		return nil
	case f.reenroll && f.dev:
		// fleet dev's provider may have lost its machine users (its
		// state file deleted): Reattach makes a new one when needed.
		res, err = dev.Reattach(ctx, en, kc, idp, f.namespace, req)
	case f.reenroll:
		res, err = en.Reenroll(ctx, req)
	default:
		res, err = en.Enroll(ctx, req)
		if errors.Is(err, enroll.ErrAlreadyEnrolled) && f.dev {
			err = fmt.Errorf("%w: after a restart of fleet dev, or to replace its key, pass --reenroll", err)
		}
	}
	if errors.Is(err, enroll.ErrKeyFileExists) {
		err = fmt.Errorf("%w: pass --overwrite to replace it (or --key-file for another file)", err)
	}
	if err != nil {
		return err
	}
	if f.reenroll {
		fmt.Fprintf(out, "re-enrolled device %s (subject %s): key %s written to %s, %d old key(s) removed\n", res.Device, res.Subject, res.KeyID, res.KeyFile, len(res.Revoked))
	} else {
		fmt.Fprintf(out, "enrolled device %s/%s (subject %s): key %s written to %s\n", f.namespace, res.Device, res.Subject, res.KeyID, res.KeyFile)
	}
	if !f.dev {
		return nil
	}
	// fleet dev's OpenBao stand-in binds its devices' role to their
	// subjects, as production binds a group's role.
	if err := dev.BindDevice(ctx, ep, res.Subject); err != nil {
		return fmt.Errorf("enroll: -dev: %w", err)
	}
	if err := waitRegistered(ctx, kc, f.namespace, res.Device, res.Subject); err != nil {
		return err
	}
	fmt.Fprintf(out, "the operator registered %s's identity: the auth callout admits its key\n\n", res.Device)
	printAgentSettings(out, ep, res.KeyFile, f.agentKeyFile, f.agentPodman)
	return nil
}

// restConfig loads kubeconfig (empty: the default loading rules,
// $KUBECONFIG then ~/.kube/config).
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
}

// kubeClient is a client of the Fleet types for kubeconfig (empty: the
// default loading rules).
func kubeClient(kubeconfig string) (client.Client, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("enroll: -kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	kc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("enroll: Kubernetes client (-kubeconfig): %w", err)
	}
	return kc, nil
}

// registerTimeout bounds the wait for the operator to register a device.
const registerTimeout = time.Minute

// waitRegistered waits until the operator has registered the Device's
// identity subject in fleet-identity (condition IdentityRegistered of the
// current generation): until then the auth callout refuses the device.
func waitRegistered(ctx context.Context, kc client.Client, namespace, device, subject string) error {
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var why string
	for {
		var d v1alpha1.Device
		err := kc.Get(ctx, client.ObjectKey{Namespace: namespace, Name: device}, &d)
		c := meta.FindStatusCondition(d.Status.Conditions, v1alpha1.ConditionIdentityRegistered)
		switch {
		case err != nil:
			why = err.Error()
		case d.Spec.IdentitySubject != subject:
			why = "its spec.identitySubject is " + d.Spec.IdentitySubject + ", not " + subject
		case c == nil || c.ObservedGeneration != d.Generation:
			why = "no IdentityRegistered condition yet: is fleet dev's operator running?"
		case c.Status == metav1.ConditionTrue:
			return nil
		default:
			why = c.Reason + ": " + c.Message
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("enroll: the operator did not register device %s/%s within %s (%s): %w", namespace, device, registerTimeout, why, ctx.Err())
		case <-t.C:
		}
	}
}

// agentEnv are the environment variables of fleet-agent that the printed
// settings set, in the order printed, with their flags.
var agentEnv = []struct{ env, flag string }{
	{"NATS_URL", "--nats-url"},
	{"FLEET_KEY_FILE", "--key-file"},
	{"FLEET_OPENBAO_URL", "--openbao-url"},
	{"FLEET_OPENBAO_ROLE", "--openbao-role"},
	{"FLEET_OPENBAO_DEVICE_PREFIX", "--openbao-device-prefix"},
}

// printAgentSettings prints how to run fleet-agent on the device: the
// command line, and the settings of deploy/systemd/fleet-agent.service.
// The device id, the issuer and the audience are in the key file.
func printAgentSettings(out io.Writer, ep dev.Endpoints, keyFile, agentKeyFile, socket string) {
	values := map[string]string{
		"NATS_URL": ep.NATSURL, "FLEET_KEY_FILE": agentKeyFile, "FLEET_OPENBAO_URL": ep.OpenBaoAddr,
		"FLEET_OPENBAO_ROLE": ep.OpenBaoRole, "FLEET_OPENBAO_DEVICE_PREFIX": ep.OpenBaoDevicePrefix,
	}
	var cmd []string
	for _, e := range agentEnv {
		cmd = append(cmd, e.flag, shellWord(values[e.env]))
		if e.env == "FLEET_KEY_FILE" {
			cmd = append(cmd, "--runtime", "podman", "--podman-socket", shellWord(socket))
		}
	}
	fmt.Fprintf(out, `On the device: copy %s there as %s (mode 0600, owned by the user that runs the agent)
and the agent built for its architecture (task build:agent: bin/fleet-agent-linux-arm64 or
bin/fleet-agent-linux-amd64) as fleet-agent on its PATH, then run:
  fleet-agent %s

Or under systemd with deploy/systemd/fleet-agent.service (its header says how to install it):
the key file as %s (the unit's FLEET_KEY_FILE), and in /etc/fleet-agent/agent.env (its EnvironmentFile):
`, keyFile, agentKeyFile, strings.Join(cmd, " "), unitKeyFile)
	for _, e := range agentEnv {
		if e.env == "FLEET_KEY_FILE" {
			continue // the unit sets it
		}
		fmt.Fprintf(out, "  %s=%s\n", e.env, values[e.env])
	}
	fmt.Fprintln(out, "  # the key file names the device and the issuer; the unit's ExecStart sets --runtime podman and the fleet-agent user's rootless Podman socket")
	if loopbackOnly(ep) {
		fmt.Fprintf(out, "\nfleet dev listens on %s only: a device elsewhere cannot reach these URLs. Restart fleet dev with\n"+
			"--listen 0.0.0.0 (or --advertise <address>), then enroll again with --reenroll.\n", ep.Listen)
	}
}

// loopbackOnly reports whether the fleet dev of ep is reachable from this
// machine only.
func loopbackOnly(ep dev.Endpoints) bool {
	ip := net.ParseIP(ep.Advertise)
	return ep.Advertise == "localhost" || ip != nil && ip.IsLoopback()
}

// plainWord is a shell word that needs no quoting ($ is kept: the default
// socket names $XDG_RUNTIME_DIR for the device's shell to expand).
var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./$-]+$`)

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if plainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
