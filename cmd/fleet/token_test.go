package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/identity/tokencheck"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
)

// tokenTestPassword is the NATS reader's password: it must never be printed.
const tokenTestPassword = "pw-of-the-token-test-not-to-be-printed"

// tokenPlane is a control plane (the development provider, the embedded
// server with the callout's configuration and fleet-identity) with a
// static user that reads fleet-identity, as fleet dev's admin does.
type tokenPlane struct {
	t     *testing.T
	plane *controlplane.Plane
	// nats are the flags connecting as the reader.
	nats []string
	// keys are the private keys of every key file made, for the output
	// checks.
	keys []string
}

func startTokenPlane(t *testing.T) *tokenPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := controlplane.Start(ctx, controlplane.Options{StoreDir: t.TempDir(), Port: -1, Sync: natsembed.FastSync,
		SigningKey: callouttest.SigningKey(),
		StaticUser: &authcallout.StaticUser{Name: "token-reader", Password: tokenTestPassword, PasswordVar: "FLEET_TOKEN_TEST_PASSWORD",
			Comment: "fleet token's test: reads fleet-identity"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	pw := filepath.Join(t.TempDir(), "reader.password")
	if err := os.WriteFile(pw, []byte(tokenTestPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tokenPlane{t: t, plane: p, nats: []string{"--nats-url", p.URL(), "--user", "token-reader", "--password-file", pw}}
}

// enroll enrolls device as `fleet enroll` and the operator would (machine
// user, key file, fleet-identity entry) and returns the key file's path
// and its subject.
func (tp *tokenPlane) enroll(device string) (string, credential.KeyFile) {
	tp.t.Helper()
	path := filepath.Join(tp.t.TempDir(), device+".key.json")
	if _, err := tp.plane.EnrollDevice(context.Background(), device, path); err != nil {
		tp.t.Fatal(err)
	}
	kf, err := credential.ReadKeyFile(path)
	if err != nil {
		tp.t.Fatal(err)
	}
	tp.keys = append(tp.keys, kf.Key)
	return path, kf
}

// setIdentity writes subject's fleet-identity entry as the operator does;
// a nil entry deletes it, as when the Device resource is deleted.
func (tp *tokenPlane) setIdentity(subject string, e *events.IdentityEntry) {
	tp.t.Helper()
	ctx := context.Background()
	key, err := events.IdentityKey(subject)
	if err != nil {
		tp.t.Fatal(err)
	}
	if e == nil {
		err = tp.plane.Identity().Delete(ctx, key)
	} else {
		var v []byte
		if v, err = e.Encode(); err == nil {
			_, err = tp.plane.Identity().Put(ctx, key, v)
		}
	}
	if err != nil {
		tp.t.Fatal(err)
	}
}

// jwtRE matches a compact JWS: a token printed by mistake.
var jwtRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)

// assertNoSecrets fails when text holds a private key's material, the
// reader's password or, unless allowToken, an id_token.
func (tp *tokenPlane) assertNoSecrets(t *testing.T, where, text string, allowToken bool) {
	t.Helper()
	if strings.Contains(text, "PRIVATE KEY") || strings.Contains(text, tokenTestPassword) {
		t.Errorf("the %s holds a private key or the password:\n%s", where, text)
	}
	for _, k := range tp.keys {
		for _, line := range strings.Split(k, "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(text, line) {
				t.Errorf("the %s holds a line of a private key", where)
				return
			}
		}
	}
	if !allowToken && jwtRE.MatchString(text) {
		t.Errorf("the %s holds an id_token:\n%s", where, text)
	}
}

func runTokenCmd(args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = tokenCmd(ctx, args, &out, &errOut, func(string) string { return "" })
	return out.String(), errOut.String(), err
}

func TestFleetTokenChecksAsTheCalloutWould(t *testing.T) {
	tp := startTokenPlane(t)
	ctx := context.Background()
	prov := tp.plane.Provider()

	okKey, okKF := tp.enroll("edge-ok")
	unknownKey, unknownKF := tp.enroll("edge-gone")
	tp.setIdentity(unknownKF.UserID, nil)
	quarantinedKey, quarantinedKF := tp.enroll("edge-quarantined")
	tp.setIdentity(quarantinedKF.UserID, &events.IdentityEntry{Device: "edge-quarantined", Quarantined: true})
	movedKey, movedKF := tp.enroll("edge-moved")
	tp.setIdentity(movedKF.UserID, &events.IdentityEntry{Device: "edge-other"})
	revokedKey, revokedKF := tp.enroll("edge-revoked")
	if err := prov.RemoveMachineKey(ctx, revokedKF.UserID, revokedKF.KeyID); err != nil {
		t.Fatal(err)
	}
	// An operator identity: a machine user with the role, no device.
	opsID, err := prov.CreateMachineUser(ctx, "token-ops", authcallout.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	opsKF, err := prov.AddMachineKey(ctx, opsID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	opsKF.Issuer, opsKF.Audience = prov.Issuer(), prov.Audience()
	opsKey := filepath.Join(t.TempDir(), "ops.key.json")
	if err := credential.WriteKeyFile(opsKey, opsKF); err != nil {
		t.Fatal(err)
	}
	tp.keys = append(tp.keys, opsKF.Key)
	// Another provider: its key set does not hold the plane's signing key.
	other, err := devop.New(devop.Options{SigningKey: callouttest.SigningKey()})
	if err != nil {
		t.Fatal(err)
	}
	octx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- other.Run(octx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	with := func(args ...string) []string { return append(args, tp.nats...) }
	tests := []struct {
		name string
		args []string
		// wantCheck is the check named as failing; "" when accepted.
		wantCheck string
		want      []string
	}{
		{"an enrolled device's token is accepted and its claims are printed", with("--key-file", okKey), "",
			[]string{"iss     " + prov.Issuer(), "aud     " + prov.Audience(), "sub     " + okKF.UserID, "kid     " + prov.SigningKeyID(), "alg     RS256",
				" left)", "ok       grant", "ok       token", "registered to device edge-ok (the key file's device)",
				"accepted: the auth callout would let this identity connect"}},
		{"a wrong audience is refused at the audience check", with("--key-file", okKey, "--audience", "not-fleet"), "audience",
			[]string{`the callout expects "not-fleet"`, `callout: "authcallout: invalid token: wrong audience" (reason token_invalid, verification wrong_audience)`,
				"refused: the auth callout would refuse this device at the audience check"}},
		{"a revoked machine key is refused at the grant", with("--key-file", revokedKey), "grant",
			[]string{"the provider refused the machine key (key " + revokedKF.KeyID, "reason no_token", "fleet enroll --reenroll",
				"skipped  token "}},
		{"a key set without the token's kid is refused at the key check", with("--key-file", okKey, "--jwks-url", other.JWKSURL()), "key",
			[]string{`the token is signed with key "` + prov.SigningKeyID() + `"`, "reason unknown_key, verification unknown_key"}},
		{"an identity not in fleet-identity is refused as unknown", with("--key-file", unknownKey), "identity",
			[]string{"subject " + unknownKF.UserID + " has no fleet-identity entry", "authcallout: unknown identity", "reason unknown_identity"}},
		{"a quarantined device is refused as quarantined", with("--key-file", quarantinedKey), "quarantine",
			[]string{"which is quarantined (its Device carries the label blacklist=true)", `"authcallout: device is quarantined: edge-quarantined" (reason quarantined)`}},
		{"an identity registered to another device is refused at the device check", with("--key-file", movedKey), "device",
			[]string{"is registered to device edge-other, but this key file is for device edge-moved"}},
		{"an operator's token is accepted by its role without fleet-identity", with("--key-file", opsKey), "",
			[]string{"roles   fleet-operator", "ok       role", "accepted: the auth callout would let this identity connect"}},
		{"without NATS credentials only the token is checked", []string{"--key-file", okKey}, "",
			[]string{"skipped  identity    fleet-identity not read", "token accepted: the auth callout would accept this token; the identity was not checked"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runTokenCmd(tc.args...)
			var refused *tokencheck.Refused
			switch {
			case tc.wantCheck == "" && err != nil:
				t.Fatalf("refused: %v\n%s", err, out)
			case tc.wantCheck != "" && !errors.As(err, &refused):
				t.Fatalf("error %v, want a refusal at the %s check\n%s", err, tc.wantCheck, out)
			case refused != nil && refused.Check.Check != tc.wantCheck:
				t.Fatalf("refused at the %s check, want %s: %v\n%s", refused.Check.Check, tc.wantCheck, err, out)
			}
			if refused != nil && !strings.Contains(err.Error(), "at the "+tc.wantCheck+" check") {
				t.Errorf("the error does not name the check: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the output lacks %q:\n%s", w, out)
				}
			}
			tp.assertNoSecrets(t, "output", out+errOut, false)
			if err != nil {
				tp.assertNoSecrets(t, "error", err.Error(), false)
			}
		})
	}

	t.Run("--raw prints exactly the token, and it verifies", func(t *testing.T) {
		out, errOut, err := runTokenCmd(with("--key-file", okKey, "--raw")...)
		if err != nil {
			t.Fatal(err)
		}
		tok, ok := strings.CutSuffix(out, "\n")
		if !ok || strings.ContainsAny(tok, "\n ") || !jwtRE.MatchString(tok) {
			t.Fatalf("stdout is not one token on its own line: %q", out)
		}
		claims, err := tp.plane.Verifier().Verify(ctx, tok)
		if err != nil {
			t.Fatalf("the printed token does not verify: %v", err)
		}
		if claims.Subject != okKF.UserID {
			t.Errorf("subject %s, want %s", claims.Subject, okKF.UserID)
		}
		if !strings.Contains(errOut, "accepted: the auth callout would let this identity connect") {
			t.Errorf("the report is not on stderr:\n%s", errOut)
		}
		tp.assertNoSecrets(t, "report", errOut, false)
		tp.assertNoSecrets(t, "token line", out, true)
	})

	t.Run("--json reports the claims and the failed check", func(t *testing.T) {
		out, _, err := runTokenCmd(with("--key-file", okKey, "--audience", "not-fleet", "--json")...)
		var refused *tokencheck.Refused
		if !errors.As(err, &refused) {
			t.Fatalf("error %v, want a refusal", err)
		}
		var rep tokencheck.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("the output is not the JSON report: %v\n%s", err, out)
		}
		if rep.Accepted || rep.Claims == nil || rep.Claims.Subject != okKF.UserID || rep.AudienceFrom != "--audience" {
			t.Errorf("report %+v", rep)
		}
		if f := rep.Failed(); f == nil || f.Check != "audience" || f.Verification != "wrong_audience" || f.Reason != "token_invalid" {
			t.Errorf("failed check %+v, want audience (wrong_audience, token_invalid)", f)
		}
		tp.assertNoSecrets(t, "output", out, false)
	})
}

func TestFleetTokenErrorsNameTheFlagToFix(t *testing.T) {
	tp := startTokenPlane(t)
	key, _ := tp.enroll("edge-1")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notJSON := write("broken.json", "{not json")
	noType := write("notype.json", `{"keyId":"k","key":"x","userId":"u"}`)
	wrongPW := write("wrong.password", "not-the-password")
	kf, err := credential.ReadKeyFile(key)
	if err != nil {
		t.Fatal(err)
	}
	kf.Issuer, kf.Audience = "", ""
	bare := filepath.Join(dir, "zitadel.json")
	if err := credential.WriteKeyFile(bare, kf); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"no key file names --key-file", nil, []string{"--key-file is required"}},
		{"a key file that is not JSON names --key-file", []string{"--key-file", notJSON}, []string{"--key-file", "not a JSON object"}},
		{"a key file without its type names --key-file and the field", []string{"--key-file", noType}, []string{"--key-file", `field "type" is missing`}},
		{"a Zitadel key file without an issuer asks for --issuer", []string{"--key-file", bare}, []string{"names no issuer: give --issuer"}},
		{"a key file without an audience asks for --audience", []string{"--key-file", bare, "--issuer", tp.plane.Provider().Issuer()}, []string{"names no audience: give --audience"}},
		{"an issuer that does not answer names --issuer", []string{"--key-file", key, "--issuer", "http://127.0.0.1:1"}, []string{"does not answer as an OpenID Provider", "check --issuer"}},
		{"--raw with --json is refused", []string{"--key-file", key, "--raw", "--json"}, []string{"--raw and --json exclude each other"}},
		{"a wrong NATS password names --password-file", []string{"--key-file", key, "--nats-url", tp.plane.URL(), "--user", "token-reader", "--password-file", wrongPW},
			[]string{"check --user and --password-file"}},
		{"a NATS server that does not answer names --nats-url", []string{"--key-file", key, "--nats-url", "nats://127.0.0.1:1"}, []string{"check --nats-url"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runTokenCmd(tc.args...)
			if err == nil {
				t.Fatalf("no error\n%s", out)
			}
			var refused *tokencheck.Refused
			if errors.As(err, &refused) {
				t.Fatalf("a refusal, want a flag error: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			tp.assertNoSecrets(t, "output", out+errOut+err.Error(), false)
		})
	}
}
