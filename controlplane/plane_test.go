package controlplane_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

func start(t *testing.T, o controlplane.Options) *controlplane.Plane {
	t.Helper()
	o.StoreDir, o.Port, o.Sync = t.TempDir(), -1, natsembed.FastSync
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := controlplane.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func TestAPlaneAuthorisesAnEnrolledDeviceAndItsStaticUser(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "encrypted", true: "plain"}[plain], func(t *testing.T) {
			p := start(t, controlplane.Options{Plain: plain,
				StaticUser: &authcallout.StaticUser{Name: "bypass", Password: "bypass-pw", PasswordVar: "BYPASS_PASSWORD", Comment: "test"}})
			if (p.XKey() == nil) != plain || strings.Contains(p.Config(), "xkey: $FLEET_CALLOUT_XKEY") == plain {
				t.Fatalf("plain %v: xkey %v, configuration with xkey line %v", plain, p.XKey() != nil, !plain)
			}
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "d1.json")
			if _, err := p.EnrollDevice(ctx, "d1", path); err != nil {
				t.Fatal(err)
			}
			kf, err := credential.ReadKeyFile(path)
			if err != nil {
				t.Fatal(err)
			}
			src, err := credential.New(ctx, credential.Options{Issuer: kf.Issuer, Key: kf, Audience: kf.Audience})
			if err != nil {
				t.Fatal(err)
			}
			dev, err := nats.Connect(p.URL(), src.NATSOptions("d1")...)
			if err != nil {
				t.Fatalf("device connect: %v", err)
			}
			defer dev.Close()
			subj, _ := events.ReportSubject("d1", events.ReportHeartbeat)
			if err := dev.Publish(subj, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			if err := dev.Flush(); err != nil {
				t.Fatal(err)
			}
			static, err := nats.Connect(p.URL(), nats.UserInfo("bypass", "bypass-pw"))
			if err != nil {
				t.Fatalf("static user connect: %v", err)
			}
			static.Close()
			if _, err := p.Store().JetStream().Stream(ctx, events.StreamReports); err != nil {
				t.Fatalf("the operator's store: %v", err)
			}
		})
	}
}

func TestAFailingPartStopsThePlaneAndCloseReportsItOnce(t *testing.T) {
	p := start(t, controlplane.Options{})
	boom := errors.New("boom")
	p.Go("failing part", func(context.Context) error { return boom })
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10s after a part failed")
	}
	if err := p.Err(); !errors.Is(err, boom) || !strings.Contains(err.Error(), "failing part") {
		t.Fatalf("Err() = %v, want boom named by its part", err)
	}
	if err := p.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close() = %v, want boom", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close() = %v, want nil", err)
	}
	ran := make(chan struct{})
	p.Go("late part", func(context.Context) error { close(ran); return nil })
	select {
	case <-ran:
		t.Fatal("Go ran a part after Close")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestCloseStopsThePartsWithoutAFailure(t *testing.T) {
	p := start(t, controlplane.Options{})
	stopped := make(chan struct{})
	p.Go("waiting part", func(ctx context.Context) error { <-ctx.Done(); close(stopped); return ctx.Err() })
	nc, err := p.ConnectMachine(context.Background(), "tool", authcallout.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatalf("Err() while running = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned before the part stopped")
	}
	if !nc.IsClosed() {
		t.Fatal("a connection the plane made is open after Close")
	}
	if p.Err() != nil {
		t.Fatalf("Err() after Close = %v, want nil", p.Err())
	}
}

func TestOptionsErrorsNameTheField(t *testing.T) {
	err := controlplane.Options{Config: "x", StaticUser: &authcallout.StaticUser{}, Replicas: -1,
		Secrets: &controlplane.Secrets{}}.Validate()
	for _, want := range []string{"StoreDir", "StaticUser", "Replicas", "password is empty", "Issuer", "XKey"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to name %s", err, want)
		}
	}
	tests := []struct {
		name string
		o    controlplane.Options
		want string
	}{
		{"servers without the secrets they run", controlplane.Options{Servers: []string{"nats://127.0.0.1:4222"}}, "Servers needs Secrets"},
		{"an external callout without servers", controlplane.Options{StoreDir: "x", ExternalCallout: true}, "ExternalCallout needs Servers"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want it to say %q", err, tc.want)
			}
		})
	}
	if s := (controlplane.Secrets{CalloutPassword: "hunter2"}).String(); strings.Contains(s, "hunter2") {
		t.Errorf("Secrets.String() = %q shows a password", s)
	}
}

func TestAReplicaThatCannotConnectClosesWhatItOpened(t *testing.T) {
	sec, err := controlplane.NewSecrets()
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, controlplane.Options{Secrets: sec})
	before := p.Server().NATS().NumClients()
	_, err = authcallout.Connect(authcallout.ReplicaOptions{URL: p.URL(), CalloutPassword: sec.CalloutPassword,
		ReaderPassword: "wrong", Issuer: sec.Issuer, VerifierOptions: authcallout.VerifierOptions{Issuer: p.Provider().Issuer(), Audience: "a"}})
	if err == nil || !strings.Contains(err.Error(), "connect as "+authcallout.DefaultReaderUser) || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("Connect() = %v, want the reader's connect named without its password", err)
	}
	if testenv.Poll(context.Background(), 5*time.Second, func() bool { return p.Server().NATS().NumClients() <= before }) != nil {
		t.Fatalf("%d clients after the failed Connect, want %d: the callout connection was left open", p.Server().NATS().NumClients(), before)
	}
}

// TestAPlaneOnTheAddressesItIsGivenAdmitsDevicesOfTheIssuerItAdvertises is
// fleet dev's --listen and --advertise: NATS on the given host, the
// provider on the given listener with the issuer URL devices reach it at
// (the callout checks iss against it), its management API open to the
// admin token only.
func TestAPlaneOnTheAddressesItIsGivenAdmitsDevicesOfTheIssuerItAdvertises(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	p := start(t, controlplane.Options{Host: "127.0.0.1", ProviderListener: ln, ProviderIssuer: issuer, ProviderAdminToken: "admin-pat"})
	if p.Provider().Issuer() != issuer {
		t.Fatalf("the provider's issuer is %s, want %s", p.Provider().Issuer(), issuer)
	}
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "d1.json")
	if _, err := p.EnrollDevice(ctx, "d1", path); err != nil {
		t.Fatal(err)
	}
	kf, err := credential.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if kf.Issuer != issuer {
		t.Fatalf("the key file's issuer is %s, want %s", kf.Issuer, issuer)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: kf.Issuer, Key: kf, Audience: kf.Audience})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := nats.Connect(p.URL(), src.NATSOptions("d1")...)
	if err != nil {
		t.Fatalf("a device with the advertised issuer is refused: %v", err)
	}
	dev.Close()
	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"the management API answers the admin token", "admin-pat", http.StatusOK},
		{"the management API refuses another token", "other", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, issuer+"/management/v1/users/_search", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tc.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
