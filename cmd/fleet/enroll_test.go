package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestFleetEnrollEnrollsReenrollsAndRevokes runs `fleet enroll` against a
// real API server and the development provider's management API.
func TestFleetEnrollEnrollsReenrollsAndRevokes(t *testing.T) {
	srv, op, common := startEnrollTarget(t)
	dir := t.TempDir()
	key1, key2 := filepath.Join(dir, "k1.json"), filepath.Join(dir, "k2.json")
	grant := func(path string) error {
		kf, err := credential.ReadKeyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		src, err := credential.New(context.Background(), credential.Options{Issuer: op.Issuer(), Key: kf})
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Token(context.Background())
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	device := func() v1alpha1.Device {
		var d v1alpha1.Device
		if err := kc.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "edge-cli"}, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}

	if err := runEnroll(append(common, "-key-file", key1, "edge-cli")); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	kf, err := credential.ReadKeyFile(key1)
	if err != nil {
		t.Fatal(err)
	}
	if got := device().Spec.IdentitySubject; got != kf.UserID {
		t.Fatalf("identitySubject %q, want the key file's user %q", got, kf.UserID)
	}
	if err := grant(key1); err != nil {
		t.Fatalf("enrolled key: %v", err)
	}
	if err := runEnroll(append(common, "-key-file", key1, "edge-cli")); err == nil {
		t.Fatal("enrolling twice succeeded")
	}
	if err := runEnroll(append(common, "-reenroll", "-key-file", key2, "edge-cli")); err != nil {
		t.Fatalf("re-enroll: %v", err)
	}
	if err := grant(key1); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("old key after re-enrollment: %v, want ErrGrant", err)
	}
	if err := grant(key2); err != nil {
		t.Fatalf("new key: %v", err)
	}
	if err := runEnroll(append(common, "-revoke", "edge-cli")); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if err := grant(key2); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("key after revocation: %v, want ErrGrant", err)
	}
	if got := device().Labels[v1alpha1.LabelBlacklist]; got != "true" {
		t.Fatalf("blacklist label %q, want \"true\"", got)
	}
}

// TestEnrollFlagErrorsNameTheFix: flags that contradict each other, -dev's
// flags without -dev, and -dev without a running fleet dev are refused
// before anything is enrolled.
func TestEnrollFlagErrorsNameTheFix(t *testing.T) {
	running := t.TempDir() // a data folder whose fleet dev "runs": this process
	self := strconv.Itoa(os.Getpid())
	if err := os.MkdirAll(filepath.Join(running, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		dev.EndpointsFile: `{"pid": ` + self + `, "namespace": "lab"}`,
		"run/owner":       self,
	} {
		if err := os.WriteFile(filepath.Join(running, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A fleet dev older than the stand-in's root token in its endpoints.
	older := t.TempDir()
	if err := os.MkdirAll(filepath.Join(older, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		dev.EndpointsFile: `{"pid": ` + self + `, "namespace": "lab", "issuer": "http://127.0.0.1:1", "audience": "a",
			"idpTokenFile": "` + filepath.Join(older, "idp.token") + `", "openbaoAddr": "http://127.0.0.1:1", "openbaoRole": "fleet-group-lab-lab"}`,
		"run/owner": self,
		"idp.token": "pat",
	} {
		if err := os.WriteFile(filepath.Join(older, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"-data-dir without -dev is refused", []string{"-data-dir", t.TempDir(), "-key-file", "k.json", "d"}, "add -dev"},
		{"-agent-podman-socket without -dev is refused", []string{"-agent-podman-socket", "unix:///s", "-key-file", "k.json", "d"}, "add -dev"},
		{"-dev without a fleet dev on the data folder says to start it", []string{"-dev", "-data-dir", t.TempDir(), "-key-file", "k.json", "d"},
			"start `fleet dev --data-dir"},
		{"-dev with another namespace than fleet dev's is refused", []string{"-dev", "-data-dir", running, "-namespace", "prod", "-key-file", "k.json", "d"},
			"runs namespace lab"},
		{"-label with -reenroll is refused", []string{"-dev", "-data-dir", running, "-reenroll", "-label", "role=analyzer", "-key-file", "k.json", "d"},
			"kubectl label"},
		// Its endpoints name no OpenBao stand-in root token: the device
		// could be enrolled but not bound to its group's role.
		{"-dev with an older fleet dev says to restart it", []string{"-dev", "-data-dir", older, "-key-file", filepath.Join(older, "d.json"), "d"},
			"restart fleet dev (`fleet dev --data-dir " + older + "`), then enroll"},
		{"the re-enroll hint spells the flag as the docs do", []string{"-dev", "-data-dir", older, "-key-file", filepath.Join(older, "d.json"), "d"},
			"pass --reenroll for a device enrolled already"},
		{"-dev -reenroll with an older fleet dev says to restart it", []string{"-dev", "-data-dir", older, "-reenroll", "-key-file", filepath.Join(older, "d.json"), "d"},
			"restart fleet dev (`fleet dev --data-dir " + older + "`), then enroll"},
		{"the quarantine label is refused", []string{"-label", "blacklist=true", "-key-file", "k.json", "d"}, "-revoke"},
		{"a control plane label is refused", []string{"-label", "fleet.nationtech.io/x=y", "-key-file", "k.json", "d"}, "control plane's"},
		{"without -dev the provider must be given", []string{"-key-file", "k.json", "d"}, "-idp-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FLEET_IDP_URL", "")
			t.Setenv("FLEET_IDP_TOKEN_FILE", "")
			err := runEnroll(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestThePrintedAgentSettingsAreTheAgentsFlagsAndVariables: the command
// line and the EnvironmentFile lines say the same, the device-side paths
// are the flags', and a loopback fleet dev is called out.
func TestThePrintedAgentSettingsAreTheAgentsFlagsAndVariables(t *testing.T) {
	lan := dev.Endpoints{Listen: "0.0.0.0", Advertise: "192.0.2.7", NATSURL: "nats://192.0.2.7:4222", OpenBaoAddr: "http://192.0.2.7:40002",
		OpenBaoRole: "fleet-group-lab-lab", OpenBaoDevicePrefix: "fleet/lab"}
	loopback := lan
	loopback.Listen, loopback.Advertise, loopback.NATSURL, loopback.OpenBaoAddr = "127.0.0.1", "127.0.0.1", "nats://127.0.0.1:4222", "http://127.0.0.1:40002"
	for _, tc := range []struct {
		name          string
		ep            dev.Endpoints
		keyFile, sock string
		want          []string
		absent        []string
	}{
		{
			name: "with the defaults the agent reads the unit's key file and the user's rootless socket",
			ep:   lan, keyFile: unitKeyFile, sock: defaultDevicePodman,
			want: []string{
				"  fleet-agent --nats-url nats://192.0.2.7:4222 --key-file /etc/fleet-agent/key.json --runtime podman --podman-socket unix://$XDG_RUNTIME_DIR/podman/podman.sock --openbao-url http://192.0.2.7:40002 --openbao-role fleet-group-lab-lab --openbao-device-prefix fleet/lab\n",
				"\n  NATS_URL=nats://192.0.2.7:4222\n  FLEET_OPENBAO_URL=http://192.0.2.7:40002\n  FLEET_OPENBAO_ROLE=fleet-group-lab-lab\n  FLEET_OPENBAO_DEVICE_PREFIX=fleet/lab\n",
				"copy pi-1.json there as /etc/fleet-agent/key.json",
			},
			absent: []string{"listens on", "FLEET_KEY_FILE="},
		},
		{
			name: "a device path with a space is quoted for the shell",
			ep:   lan, keyFile: "/home/pi/fleet key.json", sock: "unix:///run/podman/podman.sock",
			want: []string{"--key-file '/home/pi/fleet key.json' --runtime podman --podman-socket unix:///run/podman/podman.sock "},
		},
		{
			name: "a fleet dev on loopback is called out",
			ep:   loopback, keyFile: unitKeyFile, sock: defaultDevicePodman,
			want: []string{"fleet dev listens on 127.0.0.1 only", "--listen 0.0.0.0", "enroll again with --reenroll"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printAgentSettings(&b, tc.ep, "pi-1.json", tc.keyFile, tc.sock)
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("the settings lack %q:\n%s", w, b.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("the settings have %q:\n%s", a, b.String())
				}
			}
		})
	}
}

// TestEnrollDevPrintsThePodmanSocketFleetDevUses: without
// -agent-podman-socket, the printed command line of a fleet dev on
// loopback (the device is this machine) names the socket fleet dev drives
// (a root user's $XDG_RUNTIME_DIR is empty, so the rootless default would
// name /podman/podman.sock); a fleet dev without Podman, or one on the
// network (the device is another machine), leaves the rootless default,
// and the flag wins.
func TestEnrollDevPrintsThePodmanSocketFleetDevUses(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		name, endpoints string
		args            []string
		want            string
	}{
		{"fleet dev on Podman on loopback: its socket", `"advertise": "127.0.0.1", "podmanSocket": "unix:///run/podman/podman.sock"`, nil, "unix:///run/podman/podman.sock"},
		{"fleet dev without Podman: the rootless default", `"advertise": "127.0.0.1", "podmanSocket": ""`, nil, defaultDevicePodman},
		{"fleet dev on the network: the device's rootless default", `"advertise": "192.0.2.7", "podmanSocket": "unix:///run/podman/podman.sock"`, nil, defaultDevicePodman},
		{"the flag wins", `"advertise": "127.0.0.1", "podmanSocket": "unix:///run/podman/podman.sock"`, []string{"-agent-podman-socket", "unix:///x.sock"}, "unix:///x.sock"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
				t.Fatal(err)
			}
			for name, text := range map[string]string{
				dev.EndpointsFile: `{"pid": ` + self + `, "namespace": "lab", ` + tc.endpoints + `}`,
				"run/owner":       self,
			} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f := enrollFlags{dev: true, dataDir: dir, agentPodman: defaultDevicePodman, set: map[string]bool{}}
			for i := 0; i < len(tc.args); i += 2 {
				f.set[strings.TrimPrefix(tc.args[i], "-")] = true
				f.agentPodman = tc.args[i+1]
			}
			if _, err := f.devDefaults(); err != nil {
				t.Fatal(err)
			}
			if f.agentPodman != tc.want {
				t.Errorf("the printed socket is %q, want %q", f.agentPodman, tc.want)
			}
		})
	}
}
