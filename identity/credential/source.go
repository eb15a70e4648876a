package credential

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/nats-io/nats.go"
	"github.com/zitadel/oidc/v3/pkg/client"
	"github.com/zitadel/oidc/v3/pkg/client/profile"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

// ProjectAudienceScope is the Zitadel scope that adds a project id to the
// id_token's audience; the auth callout checks that audience.
func ProjectAudienceScope(projectID string) string {
	return "urn:zitadel:iam:org:project:id:" + projectID + ":aud"
}

// Options configure a Source.
type Options struct {
	// Issuer is the OpenID Provider's issuer URL (discovery is read from
	// it). Required.
	Issuer string
	// Key is the machine key. Required.
	Key KeyFile
	// Audience, when set, is requested as a Zitadel project audience (see
	// ProjectAudienceScope) so the id_token's aud names it.
	Audience string
	// ExtraScopes are requested besides openid (and the audience scope).
	ExtraScopes []string
	// RefreshBefore is how long before expiry a cached id_token is replaced.
	// Default: a third of the token's lifetime, at most 5 minutes.
	RefreshBefore time.Duration
	// HTTPClient talks to the provider. Default: a client with a 30 s
	// timeout.
	HTTPClient *http.Client
	// Logger receives grant failures (never secrets). Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// DeferDiscovery lets New succeed when the provider cannot be reached:
	// the discovery document is then read by the first grant, and again
	// by every later one until it is read (an agent that boots without
	// network). Default: New reads it and fails without it.
	DeferDiscovery bool
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.Issuer == "" {
		errs = append(errs, errors.New("credential: Issuer is empty: give the OpenID Provider's issuer URL"))
	}
	if err := o.Key.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.RefreshBefore < 0 {
		errs = append(errs, fmt.Errorf("credential: RefreshBefore %s is negative", o.RefreshBefore))
	}
	return errors.Join(errs...)
}

// Token is an id_token and what Fleet needs to know about it.
type Token struct {
	// IDToken is the compact JWT.
	IDToken string
	// Subject is its sub claim (the machine user id).
	Subject string
	// IssuedAt and Expiry are its iat and exp claims.
	IssuedAt, Expiry time.Time
}

// Source obtains and caches a device's id_token. Safe for concurrent use.
type Source struct {
	o      Options
	hc     *http.Client
	scopes []string
	// ts is nil until the discovery document was read (DeferDiscovery).
	ts   profile.TokenSource
	log  *slog.Logger
	now  func() time.Time
	mu   sync.Mutex // guards cur; held during a grant so one grant runs at a time
	cur  Token
	have bool
}

// New creates a Source; it reads the provider's discovery document once.
func New(ctx context.Context, o Options) (*Source, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if _, err := signerFor(o.Key); err != nil {
		return nil, err
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	scopes := []string{oidc.ScopeOpenID}
	if o.Audience != "" {
		scopes = append(scopes, ProjectAudienceScope(o.Audience))
	}
	scopes = append(scopes, o.ExtraScopes...)
	s := &Source{o: o, hc: hc, scopes: scopes, log: o.Logger, now: o.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if err := s.discover(ctx); err != nil {
		if !o.DeferDiscovery {
			return nil, err
		}
		s.log.Warn("OpenID Provider not reachable; discovery is retried with the first grant", "issuer", o.Issuer, "err", err)
	}
	return s, nil
}

// discover reads the provider's discovery document, unless it was read.
// The caller holds s.mu, or s is not shared yet.
func (s *Source) discover(ctx context.Context) error {
	if s.ts != nil {
		return nil
	}
	ts, err := profile.NewJWTProfileTokenSource(ctx, s.o.Issuer, s.o.Key.UserID, s.o.Key.KeyID, []byte(s.o.Key.Key), s.scopes, profile.WithHTTPClient(s.hc))
	if err != nil {
		return fmt.Errorf("%w: discovery at %s: %v", ErrGrant, s.o.Issuer, redact(err, s.o.Key))
	}
	s.ts = ts
	return nil
}

// Subject is the machine user id the Source authenticates as.
func (s *Source) Subject() string { return s.o.Key.UserID }

// Token returns a valid id_token, performing the grant when none is cached or
// the cached one is within the refresh window of its expiry.
func (s *Source) Token(ctx context.Context) (Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.have && s.now().Before(s.cur.Expiry.Add(-s.refreshBefore(s.cur))) {
		return s.cur, nil
	}
	t, err := s.grant(ctx)
	if err != nil {
		return Token{}, err
	}
	s.cur, s.have = t, true
	return t, nil
}

// IDToken is Token(ctx).IDToken.
func (s *Source) IDToken(ctx context.Context) (string, error) {
	t, err := s.Token(ctx)
	return t.IDToken, err
}

// Invalidate drops the cached token: the next Token performs a grant.
func (s *Source) Invalidate() {
	s.mu.Lock()
	s.have = false
	s.mu.Unlock()
}

func (s *Source) refreshBefore(t Token) time.Duration {
	if s.o.RefreshBefore > 0 {
		return s.o.RefreshBefore
	}
	d := t.Expiry.Sub(t.IssuedAt) / 3
	if d > 5*time.Minute {
		d = 5 * time.Minute
	}
	return d
}

func (s *Source) grant(ctx context.Context) (Token, error) {
	if err := s.discover(ctx); err != nil {
		return Token{}, err
	}
	tok, err := s.ts.TokenCtx(ctx)
	if err != nil {
		return Token{}, fmt.Errorf("%w: subject %s: %v", ErrGrant, s.o.Key.UserID, redact(err, s.o.Key))
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Token{}, fmt.Errorf("%w (subject %s)", ErrNoIDToken, s.o.Key.UserID)
	}
	t, err := inspect(raw)
	if err != nil {
		return Token{}, err
	}
	return t, nil
}

// TokenHandler returns the callback for nats.TokenHandler: nats.go calls it
// on every connect and reconnect, so each one presents a current id_token.
// On failure it logs and returns "" (the callout then refuses the connect).
func (s *Source) TokenHandler(timeout time.Duration) func() string {
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	return func() string {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		t, err := s.IDToken(ctx)
		if err != nil {
			s.log.Warn("no id_token for NATS connect", "subject", s.o.Key.UserID, "err", err)
			return ""
		}
		return t
	}
}

// NATSOptions are the nats.go options a device connects with: the token
// callback and the device's own inbox prefix (_INBOX_<device>), the only
// inbox the auth callout permits.
func (s *Source) NATSOptions(device string) []nats.Option {
	return []nats.Option{
		nats.TokenHandler(s.TokenHandler(0)),
		nats.CustomInboxPrefix(InboxPrefix(device)),
	}
}

// InboxPrefix is the inbox prefix of a device: _INBOX_<device>.
func InboxPrefix(device string) string { return "_INBOX_" + device }

// inspect reads the claims Fleet needs from an id_token without verifying it
// (the Source trusts its provider's TLS; the auth callout verifies).
func inspect(raw string) (Token, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return Token{}, fmt.Errorf("%w: id_token is not a compact JWS", ErrNoIDToken)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return Token{}, fmt.Errorf("%w: id_token payload: %w", ErrNoIDToken, err)
	}
	var c struct {
		Sub string `json:"sub"`
		Iat int64  `json:"iat"`
		Exp int64  `json:"exp"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return Token{}, fmt.Errorf("%w: id_token claims: %w", ErrNoIDToken, err)
	}
	if c.Exp == 0 {
		return Token{}, fmt.Errorf("%w: id_token has no exp", ErrNoIDToken)
	}
	return Token{IDToken: raw, Subject: c.Sub, IssuedAt: time.Unix(c.Iat, 0), Expiry: time.Unix(c.Exp, 0)}, nil
}

// signerFor checks that the key parses; errors never quote it.
func signerFor(k KeyFile) (jose.Signer, error) {
	sg, err := client.NewSignerFromPrivateKeyByte([]byte(k.Key), k.KeyID)
	if err != nil {
		return nil, fmt.Errorf("%w: field \"key\" is not a PEM RSA, ECDSA or Ed25519 private key", ErrKeyFile)
	}
	return sg, nil
}

// redact returns err's text with the private key removed, should a library
// ever quote it.
func redact(err error, k KeyFile) string {
	msg := err.Error()
	if k.Key != "" {
		msg = strings.ReplaceAll(msg, k.Key, "[redacted]")
	}
	return msg
}
