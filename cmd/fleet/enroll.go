package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/enroll"
	"github.com/nationtech/harmony-fleet/identity/zitadel"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

const enrollUsage = `usage: fleet enroll [flags] <device>

Mints a machine user and key at the identity provider (Zitadel, or the
development provider of fleet dev), creates the Device resource with its
identity subject and writes the key file (mode 0600) for the device.

  fleet enroll -key-file edge-1.json edge-1            enroll a new device
  fleet enroll -reenroll -key-file edge-1.json edge-1  new key, old keys removed
  fleet enroll -revoke edge-1                          remove every key, quarantine

flags:
`

// runEnroll is `fleet enroll`.
func runEnroll(args []string) error {
	fs := flag.NewFlagSet("fleet enroll", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), enrollUsage)
		fs.PrintDefaults()
	}
	keyFile := fs.String("key-file", "", "where the device's machine key file is written (mode 0600)")
	overwrite := fs.Bool("overwrite", false, "replace an existing key file")
	reenroll := fs.Bool("reenroll", false, "mint a new key for an enrolled device and remove its old keys")
	revoke := fs.Bool("revoke", false, "remove every key of the device and quarantine it (label blacklist=true)")
	namespace := fs.String("namespace", "default", "namespace of the Device resource")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
	idpURL := fs.String("idp-url", os.Getenv("FLEET_IDP_URL"), "identity provider URL (Zitadel instance or fleet dev's provider; env FLEET_IDP_URL)")
	idpTokenFile := fs.String("idp-token-file", os.Getenv("FLEET_IDP_TOKEN_FILE"), "file holding a personal access token allowed to manage machine users (env FLEET_IDP_TOKEN_FILE)")
	orgID := fs.String("org-id", "", "Zitadel organisation id (x-zitadel-orgid)")
	keyExpiry := fs.Duration("key-expiry", 0, "key lifetime (0: no expiry)")
	issuer := fs.String("issuer", "", "OpenID issuer written into the key file for the device (default: -idp-url)")
	audience := fs.String("audience", "", "id_token audience written into the key file for the device")
	verbose := fs.Bool("v", false, "log each step")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("enroll: give exactly one device id")
	}
	device := fs.Arg(0)
	if *reenroll && *revoke {
		return errors.New("enroll: -reenroll and -revoke exclude each other")
	}
	if !*revoke && *keyFile == "" {
		return errors.New("enroll: -key-file is required: the machine key is written there")
	}
	if *idpURL == "" || *idpTokenFile == "" {
		return errors.New("enroll: -idp-url and -idp-token-file are required")
	}
	tok, err := os.ReadFile(*idpTokenFile)
	if err != nil {
		return fmt.Errorf("enroll: read -idp-token-file: %w", err)
	}
	idp, err := zitadel.New(zitadel.Options{BaseURL: *idpURL, Token: strings.TrimSpace(string(tok)), OrgID: *orgID})
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("enroll: kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	kc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("enroll: Kubernetes client: %w", err)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	en, err := enroll.New(enroll.Options{
		Client: kc, Provider: idp, Namespace: *namespace, KeyExpiry: *keyExpiry, Issuer: cmp.Or(*issuer, *idpURL), Audience: *audience,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req := enroll.Request{Device: device, KeyFile: *keyFile, Overwrite: *overwrite}
	switch {
	case *revoke:
		res, err := en.Revoke(ctx, device)
		if err != nil {
			return err
		}
		fmt.Printf("revoked device %s (subject %s): %d key(s) removed, Device labelled %s=true\n", res.Device, res.Subject, len(res.Revoked), v1alpha1.LabelBlacklist)
	case *reenroll:
		res, err := en.Reenroll(ctx, req)
		if err != nil {
			return err
		}
		fmt.Printf("re-enrolled device %s (subject %s): key %s written to %s, %d old key(s) removed\n", res.Device, res.Subject, res.KeyID, res.KeyFile, len(res.Revoked))
	default:
		res, err := en.Enroll(ctx, req)
		if err != nil {
			return err
		}
		fmt.Printf("enrolled device %s/%s (subject %s): key %s written to %s\n", *namespace, res.Device, res.Subject, res.KeyID, res.KeyFile)
	}
	return nil
}
