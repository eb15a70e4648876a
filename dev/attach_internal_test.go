package dev

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func ipNet(s string) *net.IPNet {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// TestListenAndAdvertiseHosts: where fleet dev listens and which host its
// URLs name, from --listen, --advertise and this machine's interfaces.
func TestListenAndAdvertiseHosts(t *testing.T) {
	up := net.FlagUp | net.FlagBroadcast
	machine := []iface{
		{flags: up | net.FlagLoopback, addrs: []net.Addr{ipNet("127.0.0.1/8"), ipNet("::1/128")}},
		{flags: net.FlagBroadcast, addrs: []net.Addr{ipNet("198.51.100.9/24")}}, // down
		{flags: up, addrs: []net.Addr{ipNet("fe80::1/64"), ipNet("2001:db8::5/64")}},
		{flags: up, addrs: []net.Addr{ipNet("169.254.3.4/16"), &net.IPAddr{IP: net.ParseIP("192.0.2.7")}}},
		{flags: up, addrs: []net.Addr{ipNet("203.0.113.1/24")}},
	}
	v6only := []iface{machine[0], machine[2]}
	loopbackOnly := []iface{machine[0], machine[1]}
	for _, tc := range []struct {
		name, listen, advertise   string
		ifaces                    []iface
		wantListen, wantAdvertise string
		wantErr                   string
	}{
		{name: "by default fleet dev listens on loopback and its URLs name it", wantListen: "127.0.0.1", wantAdvertise: "127.0.0.1"},
		{name: "on every interface the URLs name the first IPv4 address of an interface that is up, not loopback nor link-local",
			listen: "0.0.0.0", ifaces: machine, wantListen: "0.0.0.0", wantAdvertise: "192.0.2.7"},
		{name: "without such an IPv4 address the first global IPv6 address is named",
			listen: "::", ifaces: v6only, wantListen: "::", wantAdvertise: "2001:db8::5"},
		{name: "--advertise names the host whatever the interfaces", listen: "0.0.0.0", advertise: "laptop.lan",
			ifaces: loopbackOnly, wantListen: "0.0.0.0", wantAdvertise: "laptop.lan"},
		{name: "one address of the machine is both listened on and named", listen: "192.0.2.7", wantListen: "192.0.2.7", wantAdvertise: "192.0.2.7"},
		{name: "on every interface of a machine with loopback only, fleet dev asks for --advertise", listen: "0.0.0.0",
			ifaces: loopbackOnly, wantErr: "--advertise"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkHosts(tc.listen, tc.advertise); err != nil {
				t.Fatalf("checkHosts: %v", err)
			}
			l, a, err := resolveHosts(tc.listen, tc.advertise, func() ([]iface, error) { return tc.ifaces, nil })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || l != tc.wantListen || a != tc.wantAdvertise {
				t.Fatalf("got %q, %q (%v), want %q, %q", l, a, err, tc.wantListen, tc.wantAdvertise)
			}
		})
	}
}

func TestListenAndAdvertiseFlagErrorsNameTheFix(t *testing.T) {
	for _, tc := range []struct {
		name, listen, advertise, want string
	}{
		{"a host name is refused as --listen", "laptop.lan", "", "--listen"},
		{"--advertise with a scheme or a port is refused", "0.0.0.0", "http://laptop.lan:4222", "no scheme, no port"},
		{"--advertise of an unspecified address is refused", "0.0.0.0", "0.0.0.0", "unspecified"},
		{"--advertise of a network address while listening on loopback asks for --listen", "", "192.0.2.7", "--listen 0.0.0.0"},
		{"--advertise of a host name while listening on loopback asks for --listen", "127.0.0.1", "laptop.lan", "--listen 0.0.0.0"},
		{"--advertise localhost while listening on loopback is fine", "127.0.0.1", "localhost", ""},
		{"--advertise of a host name while listening on every interface is fine", "::", "laptop.lan", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkHosts(tc.listen, tc.advertise)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestEndpointsAreReadOnlyWhileTheirFleetDevRuns: `fleet enroll --dev`
// reads <data>/endpoints.json only when the fleet dev that wrote it still
// owns the data folder.
func TestEndpointsAreReadOnlyWhileTheirFleetDevRuns(t *testing.T) {
	self := os.Getpid()
	ep := Endpoints{PID: self, Listen: "0.0.0.0", Advertise: "192.0.2.7", NATSURL: "nats://192.0.2.7:4222", Issuer: "http://192.0.2.7:40001",
		OpenBaoAddr: "http://192.0.2.7:40002", Namespace: "lab"}
	for _, tc := range []struct {
		name string
		// endpoints is written unless nil; owner is the run/owner PID (0:
		// none).
		endpoints *Endpoints
		owner     int
		want      string // "" reads ep
	}{
		{name: "no endpoints file: fleet dev never started there", owner: self, want: "start `fleet dev --data-dir"},
		{name: "an endpoints file but no owner: fleet dev stopped", endpoints: &ep, want: "it must run while devices enroll"},
		{name: "another live fleet dev owns the folder: it is still starting", endpoints: &ep, owner: os.Getppid(), want: "is starting"},
		{name: "the fleet dev that wrote the file owns the folder", endpoints: &ep, owner: self},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.endpoints != nil {
				if err := writeEndpoints(dir, *tc.endpoints); err != nil {
					t.Fatal(err)
				}
				if fi, err := os.Stat(filepath.Join(dir, EndpointsFile)); err != nil {
					t.Fatal(err)
				} else if fi.Mode().Perm() != 0o600 {
					t.Errorf("the endpoints file has mode %v, want 0600", fi.Mode().Perm())
				}
			}
			if tc.owner != 0 {
				if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "run", "owner"), []byte(strconv.Itoa(tc.owner)+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, err := ReadEndpoints(dir)
			if tc.want != "" {
				if !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want ErrNotRunning saying %q", err, tc.want)
				}
				return
			}
			if err != nil || got != ep {
				t.Fatalf("got %+v (%v), want %+v", got, err, ep)
			}
		})
	}
}

// TestThePortsOfThePreviousRunAreTakenAgainWhenFree: the provider's and
// the stand-in's URLs stay the same across runs on one data folder (the
// issuer is in a device's key file, the stand-in's address in its
// settings), unless fleet dev now listens or advertises elsewhere or the
// port is taken.
func TestThePortsOfThePreviousRunAreTakenAgainWhenFree(t *testing.T) {
	dir := t.TempDir()
	if err := writeEndpoints(dir, Endpoints{Listen: "127.0.0.1", Advertise: "127.0.0.1", Issuer: "http://127.0.0.1:40001",
		OpenBaoAddr: "http://127.0.0.1:40002"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, listen, advertise string
		provider, bao           int
	}{
		{"the same addresses reuse the ports", "127.0.0.1", "127.0.0.1", 40001, 40002},
		{"another advertised host does not", "0.0.0.0", "192.0.2.7", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p, b := previousPorts(dir, tc.listen, tc.advertise); p != tc.provider || b != tc.bao {
				t.Fatalf("got %d, %d, want %d, %d", p, b, tc.provider, tc.bao)
			}
		})
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	ln, err := listenPreferring("127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	if got := ln.Addr().(*net.TCPAddr).Port; got == port || got == 0 {
		t.Errorf("with port %d taken, listenPreferring listens on %d, want another port", port, got)
	}
	free := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ln, err = listenPreferring("127.0.0.1", free)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := ln.Addr().(*net.TCPAddr).Port; got != free {
		t.Errorf("with port %d free, listenPreferring listens on %d", free, got)
	}
	if u := advertisedURL("http", "192.0.2.7", ln); u != "http://192.0.2.7:"+strconv.Itoa(free) {
		t.Errorf("advertisedURL = %s", u)
	}
}

func TestEveryDeviceOfTheNamespaceIsInTheDevelopmentAndExampleGroups(t *testing.T) {
	g := devGroups{namespace: "lab"}
	for _, tc := range []struct {
		name, namespace, device string
		want                    []string
	}{
		{"a simulated device is", "lab", "sim-1", []string{devGroup, ExampleGroup}},
		{"an attached device is", "lab", "pi-1", []string{devGroup, ExampleGroup}},
		{"a device of another namespace is not", "other", "pi-1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := g.Groups(context.Background(), tc.namespace, tc.device)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// TestThePrintedUsageSaysWhereFleetDevListensAndHowToAttachADevice checks
// the printed listening line and the attach paragraph.
func TestThePrintedUsageSaysWhereFleetDevListensAndHowToAttachADevice(t *testing.T) {
	for _, tc := range []struct {
		name, listen, advertise string
		want, absent            []string
	}{
		{"on loopback it says how to let a device attach", "127.0.0.1", "127.0.0.1",
			[]string{"listening on       127.0.0.1 only", "start fleet dev with --listen 0.0.0.0", "fleet enroll --dev --data-dir /data --label board=rpi pi-1\n",
				"key file /data/devices/pi-1.key.json"},
			// A relative key file lands where the command runs: the
			// repository, where task dev runs.
			[]string{"reachable from the network", "--key-file"}},
		{"on every interface it says what that exposes", "0.0.0.0", "192.0.2.7",
			[]string{"listening on       0.0.0.0 (NATS, OpenID Provider, OpenBao stand-in; URLs name 192.0.2.7): reachable from the network, no TLS, development only",
				"fleet enroll --dev --data-dir /data --label board=rpi pi-1\n"},
			[]string{"start fleet dev with --listen", "--key-file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printUsage(&b, "/data", Info{Listen: tc.listen, Advertise: tc.advertise, Namespace: "lab", Devices: []string{"sim-1"}, Runtime: RuntimeSim}, "")
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("the usage lacks %q:\n%s", w, b.String())
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(b.String(), a) {
					t.Errorf("the usage has %q:\n%s", a, b.String())
				}
			}
		})
	}
}
