package tokencheck

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func segment(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestTheReportNeverCarriesTheTokenButSaysWhatItFound decodes a token's
// claims for display and writes the report as JSON and as text: the token is
// behind Token only.
func TestTheReportNeverCarriesTheTokenButSaysWhatItFound(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	raw := segment(t, map[string]any{"kid": "k1", "alg": "RS256"}) + "." +
		segment(t, map[string]any{"iss": "https://idp.example", "aud": "fleet", "sub": "u-1", "device": "edge-1",
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
			"urn:zitadel:iam:org:project:roles": map[string]any{"b": nil, "a": nil}}) + ".c2ln"
	c := readClaims(raw, now)
	if c == nil || c.Issuer != "https://idp.example" || len(c.Audience) != 1 || c.Audience[0] != "fleet" || c.Subject != "u-1" ||
		c.Device != "edge-1" || strings.Join(c.Roles, ",") != "a,b" || c.KeyID != "k1" || c.Algorithm != "RS256" || c.ExpiresIn != "1h0m0s left" {
		t.Fatalf("claims %+v", c)
	}
	if readClaims("not.a-token", now) != nil {
		t.Error("a token that does not decode gave claims")
	}
	rep := &Report{KeyFile: KeyFile{Path: "edge-1.json", KeyID: "k1", Subject: "u-1"}, Issuer: "https://idp.example", IssuerFrom: "key file",
		Audience: "fleet", AudienceFrom: "key file", Claims: c, token: raw,
		Checks: []Check{{Check: "grant", Result: OK}, {Check: "token", Result: OK}, {Check: "identity", Result: Failed, Detail: "no entry", Reason: "unknown_identity", Fix: "enroll it"}}}
	if rep.Token() != raw {
		t.Error("Token does not return the minted token")
	}
	if f := rep.Failed(); f == nil || f.Check != "identity" {
		t.Errorf("Failed = %+v, want the identity check", f)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	for where, out := range map[string]string{"JSON": string(b), "text": text.String()} {
		if strings.Contains(out, raw) {
			t.Errorf("the %s report holds the token:\n%s", where, out)
		}
	}
	if !strings.Contains(text.String(), "refused: the auth callout would refuse this device at the identity check") {
		t.Errorf("the text report does not name the refusal:\n%s", text.String())
	}
}
