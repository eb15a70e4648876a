package agent_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// testChain is a server certificate for 127.0.0.1 and
// nats-devices.fleet.example.com signed by a CA of its own (both ECDSA
// P-256), served with the CA in the chain, and a pool trusting the CA.
func testChain(tb testing.TB) (tls.Certificate, *x509.CertPool) {
	tb.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "Fleet Devices CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats-devices.fleet.example.com"},
		DNSNames: []string{"nats-devices.fleet.example.com"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return tls.Certificate{Certificate: [][]byte{leafDER, caDER}, PrivateKey: leafKey}, pool
}

// TestAReconnectResumesTheTLSSession: a device reconnects every time its
// user JWT expires; with TLS its connection resumes the session (a ticket)
// instead of a full handshake with the server's certificate chain, also
// when the caller gave a TLS configuration of its own.
func TestAReconnectResumesTheTLSSession(t *testing.T) {
	env := callouttest.Start(t) // the provider the device's key names
	key, err := credential.ReadKeyFile(env.EnrollDevice(t, "tls-1"))
	if err != nil {
		t.Fatal(err)
	}
	cert, pool := testChain(t)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(30 * time.Second) {
		t.Fatal("the TLS server did not start")
	}
	trust := func(o *nats.Options) error {
		o.TLSConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: "tls://" + ns.Addr().String(), Key: &key, Device: "tls-1",
		NATSOptions: []nats.Option{trust, nats.CustomReconnectDelay(func(int) time.Duration { return 10 * time.Millisecond })}})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	testenv.Eventually(t, "the first connection", 30*time.Second, dc.Conn.IsConnected)
	if err := dc.Conn.Flush(); err != nil { // reads the server's session ticket
		t.Fatal(err)
	}
	if err := dc.Conn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a reconnect", 30*time.Second, func() bool { return dc.Conn.Stats().Reconnects >= 1 && dc.Conn.IsConnected() })
	st, err := dc.Conn.TLSConnectionState()
	if err != nil {
		t.Fatal(err)
	}
	if !st.HandshakeComplete || !st.DidResume {
		t.Errorf("the reconnect's TLS handshake: complete %v, resumed %v; want a resumed session", st.HandshakeComplete, st.DidResume)
	}
}
