package deploy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// calloutVars are the values of the variables the NATS configuration
// reads from the pod's environment (the Secret fleet-nats-callout), made
// for one test, and the seeds the callout pairs with them.
type calloutVars struct {
	callout, reader, sys string
	issuer, xkey         nkeys.KeyPair
}

func newCalloutVars(t *testing.T) calloutVars {
	t.Helper()
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	xkey, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	return calloutVars{callout: "pw-callout-" + t.Name(), reader: "pw-reader", sys: "pw-sys", issuer: issuer, xkey: xkey}
}

// setenv sets the variables as the StatefulSet does, for pod podName.
func (v calloutVars) setenv(t *testing.T, podName string) {
	t.Helper()
	ipub, _ := v.issuer.PublicKey()
	xpub, _ := v.xkey.PublicKey()
	for k, val := range map[string]string{"POD_NAME": podName, "FLEET_CALLOUT_PASSWORD": v.callout, "FLEET_READER_PASSWORD": v.reader,
		"FLEET_CALLOUT_SYS_PASSWORD": v.sys, "FLEET_PRESENCE_PASSWORD": v.sys, "FLEET_CALLOUT_ISSUER": ipub, "FLEET_CALLOUT_XKEY": xpub} {
		t.Setenv(k, val)
	}
}

// natsConfig writes the rendered nats-config ConfigMap's files into a
// folder, as the pod mounts them at /etc/nats, with the production TLS
// files pointed at a certificate made for the test, and returns the path
// of nats.conf.
func natsConfig(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	dir := t.TempDir()
	var found bool
	for _, u := range objs {
		if u.GetKind() != "ConfigMap" || !strings.HasPrefix(u.GetName(), "nats-config-") {
			continue
		}
		found = true
		data, _, _ := unstructured.NestedStringMap(u.Object, "data")
		for name, content := range data {
			content = strings.ReplaceAll(content, "/etc/nats-tls/", dir+"/")
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !found {
		t.Fatal("no nats-config ConfigMap rendered")
	}
	writeCert(t, dir)
	return filepath.Join(dir, "nats.conf")
}

// writeCert writes a self-signed tls.crt and tls.key into dir.
func writeCert(t *testing.T, dir string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nats.example.com"},
		DNSNames: []string{"nats.example.com"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTheRenderedNATSConfigurationIsWhatADR0002AndTheCalloutNeed(t *testing.T) {
	for _, o := range overlays {
		t.Run(o.name, func(t *testing.T) {
			objs := o.render(t)
			v := newCalloutVars(t)
			v.setenv(t, "nats-0")
			opts, err := server.ProcessConfigFile(natsConfig(t, objs))
			if err != nil {
				t.Fatalf("nats-server refuses the rendered configuration: %v", err)
			}
			ipub, _ := v.issuer.PublicKey()
			checks := []struct {
				what string
				ok   bool
			}{
				{"the server is named after its pod", opts.ServerName == "nats-0"},
				{"JetStream is on, stored on the volume", opts.JetStream && opts.StoreDir == "/data/jetstream"},
				{"every write is fsynced before its ack (ADR 0002)", opts.SyncAlways},
				{"the auth callout is wired to account AUTH with the issuer from the environment",
					opts.AuthCallout != nil && opts.AuthCallout.Account == "AUTH" && opts.AuthCallout.Issuer == ipub && opts.AuthCallout.XKey != ""},
				{"SYS is the system account", opts.SystemAccount == "SYS"},
				{"the CONNECT line holds an 8 KiB id_token", opts.MaxControlLine == 8192},
				{"lame duck mode lasts 30s", opts.LameDuckDuration == 30*time.Second},
			}
			if o.natsNodes == 3 {
				checks = append(checks,
					struct {
						what string
						ok   bool
					}{"the three nodes route to each other in cluster fleet", len(opts.Routes) == 3 && opts.Cluster.Name == "fleet" && opts.Cluster.Port == 6222},
					struct {
						what string
						ok   bool
					}{"devices get TLS", opts.TLSConfig != nil && opts.AllowNonTLS})
			} else {
				checks = append(checks, struct {
					what string
					ok   bool
				}{"a single node has no cluster", len(opts.Routes) == 0 && opts.Cluster.Port == 0})
			}
			for _, c := range checks {
				if !c.ok {
					t.Errorf("not so: %s", c.what)
				}
			}
		})
	}
}
