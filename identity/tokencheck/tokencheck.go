// Package tokencheck diagnoses a device's credential as the auth callout
// would see it, for `fleet token`: it mints an id_token from the device's
// machine key file exactly as the agent does (package credential), verifies
// it with the callout's own Verifier and names the failed check by the
// reason the Verifier counts, then, given a NATS connection that may read
// fleet-identity, makes the callout's identity decision (role, identity
// entry, quarantine, device). The report (Report, as text or JSON) names
// each check, the callout's refusal and reason labels and what to do; it
// never holds the private key, and the token only behind Token.
//
// It owns the diagnosis, not the flags: cmd/fleet parses those and prints.
// Only cmd/fleet imports it; tests may.
package tokencheck

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Options say what to check and how to reach what the callout reads.
type Options struct {
	// KeyFile is the device's machine key file.
	KeyFile string
	// Issuer, Audience and Device override the key file's; JWKSURL is the
	// key set to verify with ("": the issuer's discovery document).
	Issuer, Audience, JWKSURL, Device string
	// NATSURL ("": the identity is not checked) and User and Password, or
	// Creds, reach a NATS server whose user may read fleet-identity.
	NATSURL, User, Password, Creds string
	// Timeout is the caller's deadline on ctx, named in the error when the
	// grant does not finish.
	Timeout time.Duration
}

// The results of a check.
const (
	OK      = "ok"
	Failed  = "failed"
	Skipped = "skipped"
)

// Report is what Diagnose found. It never holds the private key; the
// token is kept unexported (Token), so the JSON form never carries it.
type Report struct {
	// KeyFile describes the key file without its private key.
	KeyFile KeyFile `json:"keyFile"`
	// Issuer and Audience are those the token was minted and checked for;
	// IssuerFrom and AudienceFrom say where they came from.
	Issuer       string `json:"issuer"`
	IssuerFrom   string `json:"issuerFrom"`
	Audience     string `json:"audience"`
	AudienceFrom string `json:"audienceFrom"`
	// JWKSURL is --jwks-url ("" : the issuer's discovery document).
	JWKSURL string `json:"jwksUrl,omitempty"`
	// Device is the device id the agent would connect as.
	Device string `json:"device,omitempty"`
	// Claims are the token's claims as it states them (the checks verify
	// them); nil when no token was minted.
	Claims *Claims `json:"claims,omitempty"`
	// Checks are the checks made, in the callout's order.
	Checks []Check `json:"checks"`
	// Accepted is true when no check failed.
	Accepted bool `json:"accepted"`
	// IdentityChecked is false when no NATS connection was given: then
	// Accepted speaks for the token only.
	IdentityChecked bool `json:"identityChecked"`

	token string
}

// Token is the minted id_token ("" when none was): a bearer secret, for
// `fleet token --raw` only.
func (r *Report) Token() string { return r.token }

// KeyFile is the non-secret part of a key file.
type KeyFile struct {
	Path    string `json:"path"`
	KeyID   string `json:"keyId"`
	Subject string `json:"userId"`
	Device  string `json:"device,omitempty"`
}

// Claims are the claims of an id_token that matter to the callout.
type Claims struct {
	Issuer    string    `json:"iss"`
	Audience  []string  `json:"aud"`
	Subject   string    `json:"sub"`
	Device    string    `json:"device,omitempty"`
	Roles     []string  `json:"roles,omitempty"`
	IssuedAt  time.Time `json:"iat"`
	Expiry    time.Time `json:"exp"`
	ExpiresIn string    `json:"expiresIn"`
	KeyID     string    `json:"kid"`
	Algorithm string    `json:"alg"`
}

// Check is one check and its outcome.
type Check struct {
	// Check names it: grant, token (all of the verifier's checks, when they
	// pass), format, algorithm, key, keys, signature, issuer, audience,
	// expiry, time, claims, role, identity, quarantine, device.
	Check string `json:"check"`
	// Result is ok, failed or skipped.
	Result string `json:"result"`
	// Detail says what was found.
	Detail string `json:"detail"`
	// Callout is the callout's own text for the refusal (its log record's
	// reason).
	Callout string `json:"callout,omitempty"`
	// Reason is the refusal's reason label of
	// fleet_authcallout_authorizations_total.
	Reason string `json:"reason,omitempty"`
	// Verification is the reason label of
	// fleet_authcallout_token_verification_errors_total, for a token the
	// verifier refused.
	Verification string `json:"verification,omitempty"`
	// Fix says what to do.
	Fix string `json:"fix,omitempty"`
}

// Refused is the error of a run whose checks found a refusal.
type Refused struct{ Check Check }

func (e *Refused) Error() string {
	return fmt.Sprintf("token: the auth callout would refuse this device at the %s check: %s", e.Check.Check, e.Check.Detail)
}

// Failed is the first failed check, if any.
func (r *Report) Failed() *Check {
	for i := range r.Checks {
		if r.Checks[i].Result == Failed {
			return &r.Checks[i]
		}
	}
	return nil
}

// Diagnose mints the token and runs the checks. An error is a setting to
// fix (its text names the flag of `fleet token`); the report, when not nil,
// holds what was found before it.
func Diagnose(ctx context.Context, o Options) (*Report, error) {
	kf, err := credential.ReadKeyFile(o.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("token: --key-file: %w", err)
	}
	rep := &Report{
		KeyFile:  KeyFile{Path: o.KeyFile, KeyID: kf.KeyID, Subject: kf.UserID, Device: kf.Device},
		Issuer:   cmp.Or(o.Issuer, kf.Issuer),
		Audience: cmp.Or(o.Audience, kf.Audience),
		JWKSURL:  o.JWKSURL,
		Device:   cmp.Or(o.Device, kf.Device),
	}
	rep.IssuerFrom, rep.AudienceFrom = from(o.Issuer, "--issuer"), from(o.Audience, "--audience")
	if rep.Issuer == "" {
		return nil, fmt.Errorf("token: the key file %s names no issuer: give --issuer, the OpenID Provider's issuer URL (fleet dev prints it as %q)", o.KeyFile, "OpenID Provider")
	}
	if rep.Audience == "" {
		return nil, fmt.Errorf("token: the key file %s names no audience: give --audience, the Fleet project id the callout expects (fleet dev: %s)", o.KeyFile, devop.DefaultAudience)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: rep.Issuer, Key: kf, Audience: rep.Audience})
	if err != nil {
		return nil, fmt.Errorf("token: the issuer %s (%s) does not answer as an OpenID Provider: %w: check --issuer", rep.Issuer, rep.IssuerFrom, err)
	}
	subject := kf.UserID
	verified := false
	var roles []string
	tok, err := src.Token(ctx)
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("token: the grant at %s did not finish: %w (--timeout %s)", rep.Issuer, ctx.Err(), o.Timeout)
	case err != nil:
		// The agent then presents no token: the callout's no_token.
		c := Check{Check: "grant", Result: Failed,
			Detail:  "the provider refused the machine key (key " + kf.KeyID + " of user " + kf.UserID + "): " + err.Error(),
			Callout: authcallout.ErrNoToken.Error(), Reason: "no_token",
			Fix: "the key was removed (fleet enroll --reenroll or --revoke), it expired, or the machine user is gone: " +
				"re-enroll the device (fleet enroll --reenroll --key-file …) and install the new key file"}
		if errors.Is(err, credential.ErrNoIDToken) {
			c.Detail = "the provider answered the grant without a usable id_token: " + err.Error()
			c.Fix = "the provider must issue an id_token for the JWT-profile grant with scope openid (Zitadel does)"
		}
		rep.Checks = append(rep.Checks, c)
		rep.Checks = append(rep.Checks, Check{Check: "token", Result: Skipped, Detail: "no token to verify"})
	default:
		rep.token = tok.IDToken
		rep.Checks = append(rep.Checks, Check{Check: "grant", Result: OK,
			Detail: "the provider issued an id_token (JWT-profile grant, scope openid and the project audience)"})
		rep.Claims = readClaims(tok.IDToken, time.Now())
		if rep.Claims != nil && rep.Claims.Subject != "" {
			subject = rep.Claims.Subject
		}
		c, claims, err := verifyAsCallout(ctx, rep)
		if err != nil {
			return nil, err
		}
		rep.Checks = append(rep.Checks, c)
		verified = c.Result == OK
		roles = claims.Roles
	}
	id, err := identityCheck(ctx, o, rep, subject, verified, roles)
	rep.Checks = append(rep.Checks, id)
	rep.Accepted = rep.Failed() == nil
	if err != nil {
		rep.Accepted = false
	}
	return rep, err
}

// from says where a setting came from.
func from(flagValue, name string) string {
	if flagValue != "" {
		return name
	}
	return "key file"
}

// verifierChecks maps a reason of fleet_authcallout_token_verification_errors_total
// to the check it names here and the reason label of the refusal
// (fleet_authcallout_authorizations_total), with what to do.
var verifierChecks = map[string]struct{ check, reason, fix string }{
	"no_token":              {"token", "no_token", "the provider returned an empty id_token"},
	"malformed_token":       {"format", "malformed_token", "the provider must issue a signed JWT id_token (a compact JWS with one signature)"},
	"algorithm_not_allowed": {"algorithm", "algorithm_not_allowed", "the provider signs with an algorithm the callout does not allow: add it to the callout's algorithms (asymmetric only) or change the provider's signing key"},
	"unknown_key":           {"key", "unknown_key", "the token's kid is not in the key set the callout reads: check the callout's oidc_issuer and jwks_url point at the provider that issued the token"},
	"keys_unavailable":      {"keys", "keys_unavailable", "the callout cannot fetch the provider's key set: check that the issuer's discovery document and jwks_uri (or jwks_url) answer from where the callout runs"},
	"expired":               {"expiry", "token_expired", "the token expired: check the clocks of the device, the provider and the callout"},
	"not_yet_valid":         {"time", "token_invalid", "the token is not valid yet: the provider's clock is ahead; fix the clocks (NTP)"},
	"issued_in_future":      {"time", "token_invalid", "the token was issued in the future: the provider's clock is ahead; fix the clocks (NTP)"},
	"wrong_issuer":          {"issuer", "token_invalid", "the token's iss differs from the issuer the callout expects: make the callout's oidc_issuer the provider's issuer exactly (scheme, host, no trailing slash)"},
	"wrong_audience":        {"audience", "token_invalid", "ask for the callout's audience: the key file's audience (or --audience) must be the Fleet project id the callout expects, and the provider must grant its audience scope"},
	"missing_claim":         {"claims", "token_invalid", "the token lacks sub, exp or iat: the provider must issue a standard id_token"},
	"claim_invalid":         {"claims", "token_invalid", "a claim does not validate: read the token's claims above"},
	"signature_invalid":     {"signature", "token_invalid", "the signature does not match the key of that kid in the key set: the provider's keys changed, or the callout reads another provider's key set"},
}

// verifyAsCallout runs the callout's Verifier on the token with the
// callout's defaults for the report's issuer and audience, then the
// expiry check the callout makes before issuing a user JWT. Which check
// failed is read from the Verifier's own metrics: the reason it counts.
func verifyAsCallout(ctx context.Context, rep *Report) (Check, authcallout.Claims, error) {
	m := authcallout.NewMetrics()
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return Check{}, authcallout.Claims{}, fmt.Errorf("token: the verifier's metrics: %w", err)
		}
	}
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: rep.Issuer, Audience: rep.Audience, JWKSURL: rep.JWKSURL, Metrics: m})
	if err != nil {
		return Check{}, authcallout.Claims{}, fmt.Errorf("token: %w: check --issuer, --audience and --jwks-url", err)
	}
	claims, err := v.Verify(ctx, rep.token)
	if err != nil {
		if ctx.Err() != nil {
			return Check{}, authcallout.Claims{}, fmt.Errorf("token: verifying at %s did not finish: %w", rep.Issuer, ctx.Err())
		}
		why := countedReason(reg)
		tc, ok := verifierChecks[why]
		if !ok {
			tc = verifierChecks["claim_invalid"]
			tc.check = "token"
		}
		return Check{Check: tc.check, Result: Failed, Detail: verifyDetail(tc.check, rep, err),
			Callout: err.Error(), Reason: tc.reason, Verification: why, Fix: tc.fix}, authcallout.Claims{}, nil
	}
	if now := time.Now(); !claims.Expiry.After(now) {
		tc := verifierChecks["expired"]
		return Check{Check: tc.check, Result: Failed,
			Detail:  fmt.Sprintf("the token expired at %s (within the callout's clock skew, but a user JWT never outlives its id_token)", claims.Expiry.UTC().Format(time.RFC3339)),
			Callout: fmt.Sprintf("%v: expired", authcallout.ErrInvalidToken), Reason: tc.reason, Fix: tc.fix}, claims, nil
	}
	keys := cmp.Or(rep.JWKSURL, "the issuer's jwks_uri")
	kid := ""
	if rep.Claims != nil {
		kid = " " + rep.Claims.KeyID
	}
	return Check{Check: "token", Result: OK,
		Detail: fmt.Sprintf("verified as the callout does: signature by key%s of %s, algorithm, iss, aud, exp, iat, nbf (30s skew), sub", kid, keys)}, claims, nil
}

// verifyDetail explains a failed verifier check with the claims at fault.
func verifyDetail(check string, rep *Report, err error) string {
	c := rep.Claims
	if c == nil {
		return err.Error()
	}
	switch check {
	case "issuer":
		return fmt.Sprintf("the token's iss is %q, the callout expects %q", c.Issuer, rep.Issuer)
	case "audience":
		return fmt.Sprintf("the token's aud is %q, the callout expects %q among them", c.Audience, rep.Audience)
	case "expiry":
		return fmt.Sprintf("the token expired at %s", c.Expiry.UTC().Format(time.RFC3339))
	case "key":
		return fmt.Sprintf("the token is signed with key %q, which the key set at %s does not hold", c.KeyID, cmp.Or(rep.JWKSURL, rep.Issuer+"'s jwks_uri"))
	case "algorithm":
		return fmt.Sprintf("the token is signed with %s: %v", c.Algorithm, err)
	}
	return err.Error()
}

// countedReason is the reason label the Verifier counted in
// fleet_authcallout_token_verification_errors_total ("other" when none).
func countedReason(reg *prometheus.Registry) string {
	mfs, err := reg.Gather()
	if err != nil {
		return "other"
	}
	for _, mf := range mfs {
		if mf.GetName() != authcallout.MetricTokenVerificationErrors {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetCounter().GetValue() == 0 {
				continue
			}
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					return l.GetValue()
				}
			}
		}
	}
	return "other"
}

// identityCheck is the callout's decision after the token: a control-plane
// role, or the subject's fleet-identity entry (read with the callout's own
// KVIdentities). An error is a connection flag to fix.
func identityCheck(ctx context.Context, o Options, rep *Report, subject string, verified bool, roles []string) (Check, error) {
	if verified && slices.Contains(roles, authcallout.RoleOperator) {
		return Check{Check: "role", Result: OK, Detail: fmt.Sprintf("role %s: the callout places this identity in the control-plane account %s without reading fleet-identity",
			authcallout.RoleOperator, authcallout.AccountFleet)}, nil
	}
	if o.NATSURL == "" {
		return Check{Check: "identity", Result: Skipped,
			Detail: "fleet-identity not read: give --nats-url with --user and --password-file, or --creds (fleet dev prints them)"}, nil
	}
	rep.IdentityChecked = true
	nc, err := connect(o)
	if err != nil {
		return Check{Check: "identity", Result: Skipped, Detail: "fleet-identity not read: no NATS connection"}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return Check{Check: "identity", Result: Skipped, Detail: "fleet-identity not read"}, fmt.Errorf("token: JetStream at %s: %w", redact(o.NATSURL), err)
	}
	e, err := authcallout.NewKVIdentities(js).Lookup(ctx, subject)
	switch {
	case errors.Is(err, authcallout.ErrUnknownIdentity):
		return Check{Check: "identity", Result: Failed,
			Detail:  fmt.Sprintf("subject %s has no fleet-identity entry: the device is not enrolled, or its Device resource was deleted or names another subject", subject),
			Callout: err.Error(), Reason: "unknown_identity",
			Fix: "enroll the device (fleet enroll -key-file … <device>), or set the Device resource's spec.identitySubject to " + subject}, nil
	case err != nil:
		return Check{Check: "identity", Result: Failed,
			Detail:  fmt.Sprintf("fleet-identity could not be read for subject %s: %v", subject, err),
			Callout: err.Error(), Reason: "identity_unavailable",
			Fix: "the NATS user must read fleet-identity (fleet dev: fleet-dev-admin); for the callout: check its reader user and the bucket"}, nil
	case e.Quarantined:
		return Check{Check: "quarantine", Result: Failed,
			Detail:  fmt.Sprintf("subject %s is registered to device %s, which is quarantined (its Device carries the label %s=true)", subject, e.Device, v1alpha1.LabelBlacklist),
			Callout: fmt.Sprintf("%v: %s", authcallout.ErrQuarantined, e.Device), Reason: "quarantined",
			Fix: fmt.Sprintf("if the device is trusted again: fleet enroll --reenroll, then kubectl label device %s %s-", e.Device, v1alpha1.LabelBlacklist)}, nil
	case rep.Device != "" && rep.Device != e.Device:
		return Check{Check: "device", Result: Failed,
			Detail: fmt.Sprintf("subject %s is registered to device %s, but this key file is for device %s: the callout would let it in as %s, and the agent (inbox _INBOX_%s) would be refused its subscriptions",
				subject, e.Device, rep.Device, e.Device, rep.Device),
			Fix: fmt.Sprintf("use device %s's own key file, or fix spec.identitySubject of the Device resources %s and %s", rep.Device, rep.Device, e.Device)}, nil
	case rep.Device == "":
		return Check{Check: "identity", Result: OK,
			Detail: fmt.Sprintf("subject %s is registered to device %s, not quarantined (the key file names no device: run the agent with --device %s)", subject, e.Device, e.Device)}, nil
	}
	return Check{Check: "identity", Result: OK,
		Detail: fmt.Sprintf("subject %s is registered to device %s (the key file's device), not quarantined", subject, e.Device)}, nil
}

// connect connects to NATS with the credentials o names.
func connect(o Options) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("fleet token"), nats.Timeout(5 * time.Second), nats.MaxReconnects(0)}
	switch {
	case o.Creds != "":
		opts = append(opts, nats.UserCredentials(o.Creds))
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	}
	nc, err := nats.Connect(o.NATSURL, opts...)
	if errors.Is(err, nats.ErrAuthorization) || (err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization")) {
		return nil, fmt.Errorf("token: connect to NATS at %s: %w: check --user and --password-file, or --creds (fleet dev: fleet-dev-admin and <data>/secrets/admin.password)", redact(o.NATSURL), err)
	}
	if err != nil {
		return nil, fmt.Errorf("token: connect to NATS at %s: %w: check --nats-url (or NATS_URL)", redact(o.NATSURL), err)
	}
	return nc, nil
}

// readClaims decodes the token's header and claims for display, without
// verifying them (the checks do); nil when the token does not decode.
func readClaims(raw string, now time.Time) *Claims {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return nil
	}
	var h struct {
		Kid string `json:"kid"`
		Alg string `json:"alg"`
	}
	var p struct {
		Iss    string          `json:"iss"`
		Aud    json.RawMessage `json:"aud"`
		Sub    string          `json:"sub"`
		Device any             `json:"device"`
		Iat    int64           `json:"iat"`
		Exp    int64           `json:"exp"`
		Roles  map[string]any  `json:"urn:zitadel:iam:org:project:roles"`
	}
	for i, dst := range []any{&h, &p} {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil || json.Unmarshal(b, dst) != nil {
			return nil
		}
	}
	c := &Claims{Issuer: p.Iss, Subject: p.Sub, KeyID: h.Kid, Algorithm: h.Alg,
		IssuedAt: time.Unix(p.Iat, 0).UTC(), Expiry: time.Unix(p.Exp, 0).UTC()}
	var one string
	if json.Unmarshal(p.Aud, &one) == nil {
		c.Audience = []string{one}
	} else {
		_ = json.Unmarshal(p.Aud, &c.Audience)
	}
	if p.Device != nil {
		c.Device = fmt.Sprint(p.Device)
	}
	for r := range p.Roles {
		c.Roles = append(c.Roles, r)
	}
	slices.Sort(c.Roles)
	if left := c.Expiry.Sub(now).Round(time.Second); left > 0 {
		c.ExpiresIn = left.String() + " left"
	} else {
		c.ExpiresIn = "expired " + (-left).String() + " ago"
	}
	return c
}

// WriteText writes the report as text.
func (r *Report) WriteText(w io.Writer) {
	kf := r.KeyFile
	fmt.Fprintf(w, "key file  %s (key %s, user %s; private key not shown)\n", kf.Path, kf.KeyID, kf.Subject)
	if r.Device != "" {
		fmt.Fprintf(w, "device    %s\n", r.Device)
	}
	fmt.Fprintf(w, "issuer    %s (%s)\n", r.Issuer, r.IssuerFrom)
	fmt.Fprintf(w, "audience  %s (%s)\n", r.Audience, r.AudienceFrom)
	if r.JWKSURL != "" {
		fmt.Fprintf(w, "key set   %s (--jwks-url)\n", r.JWKSURL)
	}
	if c := r.Claims; c != nil {
		fmt.Fprintln(w, "\nid_token (not shown; --raw prints it)")
		claim := func(name, value string) { fmt.Fprintf(w, "  %-6s  %s\n", name, value) }
		claim("iss", c.Issuer)
		claim("aud", strings.Join(c.Audience, ", "))
		claim("sub", c.Subject)
		if c.Device != "" {
			claim("device", c.Device)
		}
		if len(c.Roles) > 0 {
			claim("roles", strings.Join(c.Roles, ", "))
		}
		claim("iat", c.IssuedAt.Format(time.RFC3339))
		claim("exp", c.Expiry.Format(time.RFC3339)+" ("+c.ExpiresIn+")")
		claim("kid", c.KeyID)
		claim("alg", c.Algorithm)
	}
	fmt.Fprintln(w, "\nchecks, as the auth callout makes them")
	const indent = "                       " // under the detail column
	for _, c := range r.Checks {
		result := c.Result
		if result == Failed {
			result = "FAILED"
		}
		fmt.Fprintf(w, "  %-7s  %-10s  %s\n", result, c.Check, c.Detail)
		if c.Callout != "" {
			fmt.Fprintf(w, "%scallout: %q (reason %s", indent, c.Callout, c.Reason)
			if c.Verification != "" {
				fmt.Fprintf(w, ", verification %s", c.Verification)
			}
			fmt.Fprintln(w, ")")
		}
		if c.Fix != "" {
			fmt.Fprintf(w, "%sfix: %s\n", indent, c.Fix)
		}
	}
	fmt.Fprintln(w)
	switch f := r.Failed(); {
	case f != nil:
		fmt.Fprintf(w, "refused: the auth callout would refuse this device at the %s check\n", f.Check)
	case !r.IdentityChecked && !slices.ContainsFunc(r.Checks, func(c Check) bool { return c.Check == "role" }):
		fmt.Fprintln(w, "token accepted: the auth callout would accept this token; the identity was not checked")
	default:
		fmt.Fprintln(w, "accepted: the auth callout would let this identity connect")
	}
}

// redact hides a password in a server URL (nats://user:pass@host).
func redact(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}
