package authcallout_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/nacl/box"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// BenchmarkConnectCeiling measures what nats-server's side of the callout
// protocol costs a connect, without the callout's decision: on the
// documented server configuration, a test-only responder (not the
// product) answers every request with the least the server accepts, all
// of it precomputed except what names the connect (the request opened
// with a precomputed shared key and read without its signature check, the
// user JWT for the connect's user nkey with the device's permissions
// signed, the response signed and sealed). It is the ceiling any callout
// can reach. It interleaves, as BenchmarkConnect does, connects through
// the callout service (the token presented before), through that
// responder with the xkey (the documented configuration), through the
// same responder on a server without the xkey (to show the server's box
// operations), and with plain token auth; then the same concurrently. It
// prints connects per second, p50 latency and the ratios; it asserts no
// timing.
func BenchmarkConnectCeiling(b *testing.B) {
	e := newEnv(b, envOptions{})
	tok, err := e.device(b, "bench-dev", false).IDToken(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	withXKey := startMinimalCallout(b, true)
	withoutXKey := startMinimalCallout(b, false)
	plain := natstest.StartWith(b, natsembed.Options{Config: `authorization { token: "plain-secret" }`, Sync: natsembed.FastSync})
	inbox := nats.CustomInboxPrefix(authcallout.InboxPrefix("bench-dev"))
	connect := func(url string, opts ...nats.Option) time.Duration {
		start := time.Now()
		if err := connectOnce(url, opts...); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var real, x, nox, token []time.Duration
	for b.Loop() {
		real = append(real, connect(e.ns.ClientURL(), nats.Token(tok), inbox))
		x = append(x, connect(withXKey, nats.Token("t"), inbox))
		nox = append(nox, connect(withoutXKey, nats.Token("t"), inbox))
		token = append(token, connect(plain.ClientURL(), nats.Token("plain-secret")))
	}
	b.StopTimer()
	rate := func(d []time.Duration) float64 {
		var sum time.Duration
		for _, v := range d {
			sum += v
		}
		return float64(len(d)) / sum.Seconds()
	}
	rr, xr, nr, tr := rate(real), rate(x), rate(nox), rate(token)
	b.ReportMetric(rr, "callout-connects/s")
	b.ReportMetric(xr, "minimal-callout-connects/s")
	b.ReportMetric(nr, "minimal-callout-no-xkey-connects/s")
	b.ReportMetric(tr, "token-connects/s")
	fmt.Printf("ceiling (n=%d each, sequential, interleaved): plain token %.0f/s p50 %.2f ms\n", len(token), tr, ms(percentile(token, .5)))
	tp := percentile(token, .5)
	for _, r := range []struct {
		name string
		rate float64
		d    []time.Duration
	}{{"callout service, xkey:             ", rr, real}, {"minimal callout responder, xkey:   ", xr, x}, {"minimal callout responder, no xkey:", nr, nox}} {
		p := percentile(r.d, .5)
		fmt.Printf("  %s %.0f/s p50 %.2f ms = %.0f %% of the plain rate (p50: %.0f %%)\n", r.name, r.rate, ms(p), 100*r.rate/tr, 100*float64(tp)/float64(p))
	}

	workers := connectWorkers()
	per := max(len(x)/4, workers)
	var rd, xd, nd, td time.Duration
	for range 4 {
		rd += concurrently(b, per, workers, func() error { return connectOnce(e.ns.ClientURL(), nats.Token(tok), inbox) })
		xd += concurrently(b, per, workers, func() error { return connectOnce(withXKey, nats.Token("t"), inbox) })
		nd += concurrently(b, per, workers, func() error { return connectOnce(withoutXKey, nats.Token("t"), inbox) })
		td += concurrently(b, per, workers, func() error { return connectOnce(plain.ClientURL(), nats.Token("plain-secret")) })
	}
	n := float64(4 * per)
	fmt.Printf("ceiling (n=%d each, %d goroutines, batches alternating): plain token %.0f/s, callout service %.0f/s = %.0f %%, minimal callout xkey %.0f/s = %.0f %%, no xkey %.0f/s = %.0f %% of the plain rate\n",
		4*per, workers, n/td.Seconds(), n/rd.Seconds(), 100*td.Seconds()/rd.Seconds(), n/xd.Seconds(), 100*td.Seconds()/xd.Seconds(), n/nd.Seconds(), 100*td.Seconds()/nd.Seconds())
}

// startMinimalCallout starts a server on the documented configuration
// (without its xkey unless sealed) and the minimal responder, and returns
// the server's client URL.
func startMinimalCallout(b *testing.B, sealed bool) string {
	b.Helper()
	issuer, _ := nkeys.CreateAccount()
	issuerPub, _ := issuer.PublicKey()
	xkey, _ := nkeys.CreateCurveKeys()
	xpub, _ := xkey.PublicKey()
	conf, err := authcallout.ServerConfigWith(authcallout.ConfigVars{
		CalloutPassword: "callout", ReaderPassword: "reader", SysPassword: "sys", Issuer: issuerPub, XKey: xpub,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	if !sealed {
		const line = "    xkey: $FLEET_CALLOUT_XKEY\n"
		if strings.Count(conf, line) != 1 {
			b.Fatal("the documented configuration changed shape: its xkey line is not found")
		}
		conf = strings.Replace(conf, line, "", 1)
		// An unreferenced variable is an unknown field to nats-server.
		def := fmt.Sprintf("FLEET_CALLOUT_XKEY: %q\n", xpub)
		if strings.Count(conf, def) != 1 {
			b.Fatal("ServerConfigWith changed shape: its xkey variable is not found")
		}
		conf = strings.Replace(conf, def, "", 1)
	}
	ns := natstest.StartWith(b, natsembed.Options{Config: conf, Sync: natsembed.FastSync})
	nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo("fleet-authcallout", "callout"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	r, err := newMinimalResponder(issuer, xkey, "bench-dev")
	if err != nil {
		b.Fatal(err)
	}
	sub, err := nc.Subscribe(authcallout.Subject, func(m *nats.Msg) {
		out, err := r.answer(m.Data, m.Header.Get("Nats-Server-Xkey"))
		if err != nil {
			b.Error(err)
			return
		}
		_ = m.Respond(out)
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	return ns.ClientURL()
}

// minimalResponder answers every authorization request with the device's
// user JWT, doing the least the server accepts. Test-only: it checks
// nothing.
type minimalResponder struct {
	issuer cachedKey
	priv   ed25519.PrivateKey
	perms  jwt.Permissions
	device string
	xpriv  [32]byte
	shared map[string]*[32]byte // by server xkey; one subscription goroutine uses it
}

// cachedKey is a key pair whose public key is computed once.
type cachedKey struct {
	nkeys.KeyPair
	pub string
}

func (k cachedKey) PublicKey() (string, error) { return k.pub, nil }

func newMinimalResponder(issuer, xkey nkeys.KeyPair, device string) (*minimalResponder, error) {
	pub, _ := issuer.PublicKey()
	seed, _ := issuer.Seed()
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil {
		return nil, err
	}
	perms, err := authcallout.DevicePermissions(device)
	if err != nil {
		return nil, err
	}
	r := &minimalResponder{issuer: cachedKey{issuer, pub}, priv: ed25519.NewKeyFromSeed(raw), perms: perms, device: device, shared: map[string]*[32]byte{}}
	xseed, _ := xkey.Seed()
	_, xraw, err := nkeys.DecodeSeed(xseed)
	if err != nil {
		return nil, err
	}
	copy(r.xpriv[:], xraw)
	return r, nil
}

func (r *minimalResponder) sign(_ string, data []byte) ([]byte, error) {
	return ed25519.Sign(r.priv, data), nil
}

func (r *minimalResponder) answer(data []byte, serverXKey string) ([]byte, error) {
	var k *[32]byte
	if serverXKey != "" {
		if k = r.shared[serverXKey]; k == nil {
			raw, err := nkeys.Decode(nkeys.PrefixByteCurve, []byte(serverXKey))
			if err != nil {
				return nil, err
			}
			var peer [32]byte
			copy(peer[:], raw)
			k = new([32]byte)
			box.Precompute(k, &peer, &r.xpriv)
			r.shared[serverXKey] = k
		}
		var nonce [24]byte
		copy(nonce[:], data[4:])
		opened, ok := box.OpenAfterPrecomputation(nil, data[4+24:], &nonce, k)
		if !ok {
			return nil, errors.New("minimal responder: request does not open")
		}
		data = opened
	}
	parts := strings.Split(string(data), ".")
	if len(parts) != 3 {
		return nil, errors.New("minimal responder: request is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, err
	}
	var req struct {
		Nats struct {
			UserNkey string `json:"user_nkey"`
			Server   struct {
				ID string `json:"id"`
			} `json:"server_id"`
		} `json:"nats"`
	}
	if err := json.Unmarshal(payload, &req); err != nil {
		return nil, err
	}
	uc := jwt.NewUserClaims(req.Nats.UserNkey)
	uc.Name = r.device
	uc.Audience = authcallout.AccountDevices
	uc.Expires = time.Now().Add(time.Hour).Unix()
	uc.Permissions = r.perms
	user, err := uc.EncodeWithSigner(r.issuer, r.sign)
	if err != nil {
		return nil, err
	}
	rc := jwt.NewAuthorizationResponseClaims(req.Nats.UserNkey)
	rc.Audience = req.Nats.Server.ID
	rc.Jwt = user
	out, err := rc.EncodeWithSigner(r.issuer, r.sign)
	if err != nil {
		return nil, err
	}
	if k == nil {
		return []byte(out), nil
	}
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	sealed := append([]byte("xkv1"), nonce[:]...)
	return box.SealAfterPrecomputation(sealed, []byte(out), &nonce, k), nil
}
