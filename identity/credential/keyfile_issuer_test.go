package credential

import "testing"

func TestKeyFileCarriesFleetsOptionalIssuerAndAudience(t *testing.T) {
	k := KeyFile{Type: KeyTypeServiceAccount, KeyID: "k1", Key: testKeyPEM(t), UserID: "u1",
		Issuer: "https://auth.example", Audience: "fleet"}
	b, err := k.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseKeyFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Issuer != k.Issuer || back.Audience != k.Audience {
		t.Errorf("round trip lost them: %q %q", back.Issuer, back.Audience)
	}
	t.Run("a Zitadel key file without them still parses", func(t *testing.T) {
		k.Issuer, k.Audience = "", ""
		b, _ := k.Marshal()
		if _, err := ParseKeyFile(b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an issuer that is not a string is named", func(t *testing.T) {
		raw := `{"type":"serviceaccount","keyId":"k1","key":"x","userId":"u1","issuer":5}`
		if _, err := ParseKeyFile([]byte(raw)); err == nil || !contains(err.Error(), `"issuer"`) {
			t.Errorf("got %v", err)
		}
	})
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
