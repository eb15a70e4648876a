package agent

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
)

// tlsSessions is how many TLS sessions a device keeps to resume: one per
// server it talks to (NATS, the provider) and a few spare.
const tlsSessions = 8

// resumeTLS makes the NATS connection resume its TLS session on a
// reconnect (a TLS 1.3 ticket instead of a full handshake with the
// server's certificate chain): a device reconnects every time its user
// JWT expires, and the full handshake was the largest part of what it
// costs (docs/performance.md, An idle device). A TLSConfig given by an
// earlier option keeps its settings and gets the cache when it has none;
// without TLS (nats:// to a server that does not ask for it) it changes
// nothing.
func resumeTLS(cache tls.ClientSessionCache) nats.Option {
	return func(o *nats.Options) error {
		switch {
		case o.TLSConfig == nil:
			o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: cache}
		case o.TLSConfig.ClientSessionCache == nil:
			c := o.TLSConfig.Clone()
			c.ClientSessionCache = cache
			o.TLSConfig = c
		}
		return nil
	}
}

// providerClient is the HTTP client of the device's grants when the caller
// gives none: credential's defaults (a 30 s timeout, the system's
// certificate authorities) with TLS sessions resumed, since a grant comes
// once per token lifetime, after the idle connection was closed.
func providerClient(cache tls.ClientSessionCache) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: cache}
	return &http.Client{Timeout: 30 * time.Second, Transport: t}
}
