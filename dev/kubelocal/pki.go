package kubelocal

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// etcdPKI is the certificate material that keeps etcd's listeners to
// kube-apiserver: a CA made for this start alone, etcd's serving
// certificate (client and peer listeners) and the one client certificate
// it signs, kube-apiserver's. Files are in a folder only the owner can
// read; the CA's key is never written.
type etcdPKI struct {
	// dir holds the files (mode 0700, removed by Stop).
	dir string
	// CAFile, CertFile and KeyFile are etcd's trusted CA and serving pair;
	// ClientCertFile and ClientKeyFile kube-apiserver's client pair.
	CAFile, CertFile, KeyFile, ClientCertFile, ClientKeyFile string
}

// newEtcdPKI makes a new CA, etcd's serving certificate (127.0.0.1 and
// localhost, server and client auth: the peer listener uses it both ways)
// and a client certificate, and writes them into dir, which must exist and
// be the caller's alone.
func newEtcdPKI(dir string) (*etcdPKI, error) {
	p := &etcdPKI{
		dir:    dir,
		CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "etcd.crt"), KeyFile: filepath.Join(dir, "etcd.key"),
		ClientCertFile: filepath.Join(dir, "apiserver-etcd-client.crt"), ClientKeyFile: filepath.Join(dir, "apiserver-etcd-client.key"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("etcd CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "kubelocal etcd CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("etcd CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("etcd CA: %w", err)
	}
	if err := writePEM(p.CAFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	leaf := func(cn string, usage []x509.ExtKeyUsage, ips []net.IP, dns []string, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return fmt.Errorf("%s key: %w", cn, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage, IPAddresses: ips, DNSNames: dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return fmt.Errorf("%s certificate: %w", cn, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return fmt.Errorf("%s key: %w", cn, err)
		}
		if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
			return err
		}
		return writePEM(keyFile, "EC PRIVATE KEY", keyDER)
	}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	if err := leaf("etcd", both, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, []string{"localhost"}, p.CertFile, p.KeyFile); err != nil {
		return nil, err
	}
	if err := leaf("kube-apiserver-etcd-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil, p.ClientCertFile, p.ClientKeyFile); err != nil {
		return nil, err
	}
	return p, nil
}

// serial is a random certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}

// writePEM writes one PEM block to path, readable by the owner only.
func writePEM(path, typ string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("etcd certificates: %w", err)
	}
	return nil
}
