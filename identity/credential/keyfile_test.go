package credential

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

func TestParseKeyFile(t *testing.T) {
	key := testKeyPEM(t)
	good := KeyFile{Type: "serviceaccount", KeyID: "k1", Key: key, UserID: "u1"}
	enc := func(m map[string]any) []byte {
		b, err := jsonMarshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	full := func() map[string]any {
		return map[string]any{"type": "serviceaccount", "keyId": "k1", "key": key, "userId": "u1"}
	}
	without := func(f string) []byte { m := full(); delete(m, f); return enc(m) }
	with := func(f string, v any) []byte { m := full(); m[f] = v; return enc(m) }
	tests := []struct {
		name      string
		data      []byte
		want      KeyFile
		wantField string // named in the error
	}{
		{"a complete Zitadel key file parses", enc(full()), good, ""},
		{"a missing type is named", without("type"), KeyFile{}, `"type"`},
		{"a missing keyId is named", without("keyId"), KeyFile{}, `"keyId"`},
		{"a missing key is named", without("key"), KeyFile{}, `"key"`},
		{"a missing userId is named", without("userId"), KeyFile{}, `"userId"`},
		{"an application key is refused by its type", with("type", "application"), KeyFile{}, `"type"`},
		{"a numeric keyId is named", with("keyId", 7), KeyFile{}, `"keyId"`},
		{"an empty userId is named", with("userId", ""), KeyFile{}, `"userId"`},
		{"a key that is not PEM is named", with("key", "not a key"), KeyFile{}, `"key"`},
		{"text that is not JSON is refused", []byte("{oops"), KeyFile{}, "JSON"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKeyFile(tc.data)
			if tc.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Fatalf("key file (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrKeyFile) {
				t.Fatalf("error %v, want ErrKeyFile", err)
			}
			if !strings.Contains(err.Error(), tc.wantField) {
				t.Fatalf("error %q does not name %s", err, tc.wantField)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("error quotes the private key: %q", err)
			}
		})
	}
}

func TestKeyFileNeverPrintsTheKey(t *testing.T) {
	k := KeyFile{Type: "serviceaccount", KeyID: "k1", Key: testKeyPEM(t), UserID: "u1"}
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v", k), fmt.Sprintf("%+v", k), fmt.Sprintf("%#v", k), k.String()} {
		if strings.Contains(s, "PRIVATE KEY") {
			t.Fatalf("formatting prints the key: %s", s)
		}
	}
}

func TestWriteKeyFileIsPrivateAndRoundTrips(t *testing.T) {
	k := KeyFile{Type: "serviceaccount", KeyID: "k1", Key: testKeyPEM(t), UserID: "u1"}
	path := filepath.Join(t.TempDir(), "device.json")
	if err := WriteKeyFile(path, k); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Fatalf("mode %v, want 0600", got)
	}
	got, err := ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(k, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}
