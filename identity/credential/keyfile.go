package credential

import (
	"encoding/json"
	"fmt"
	"os"
)

// KeyTypeServiceAccount is the type field of a Zitadel machine-user key file.
const KeyTypeServiceAccount = "serviceaccount"

// KeyFile is a Zitadel machine key file: the JSON Zitadel hands out when a
// key is added to a machine user. Key is the PEM private key: a secret.
// KeyFile's String and GoString never print it.
type KeyFile struct {
	// Type is "serviceaccount" for machine users.
	Type string `json:"type"`
	// KeyID identifies the key at the provider (the assertion's kid).
	KeyID string `json:"keyId"`
	// Key is the PEM-encoded private key (PKCS#1 or PKCS#8). Secret.
	Key string `json:"key"`
	// UserID is the machine user's id: the OIDC subject of its tokens.
	UserID string `json:"userId"`
	// Issuer and Audience are Fleet's optional additions, written by
	// enrollment so that a device needs only its key file and the NATS URL:
	// the OpenID Provider to exchange the key at and the audience to ask
	// for. Zitadel's own key files do not carry them; pass them as flags
	// then. Not secret.
	Issuer   string `json:"issuer,omitempty"`
	Audience string `json:"audience,omitempty"`
	// Device is Fleet's optional addition naming the device id the key was
	// enrolled for. Not secret.
	Device string `json:"device,omitempty"`
}

// String describes the key file without its private key.
func (k KeyFile) String() string {
	return fmt.Sprintf("key file (type %q, keyId %q, userId %q, key redacted)", k.Type, k.KeyID, k.UserID)
}

// GoString is String: %#v never prints the private key either.
func (k KeyFile) GoString() string { return k.String() }

// Validate checks that every field is present and the type is one Fleet
// accepts; the error names the field (never its value for the key).
func (k KeyFile) Validate() error {
	switch {
	case k.Type == "":
		return fmt.Errorf("%w: field \"type\" is missing", ErrKeyFile)
	case k.Type != KeyTypeServiceAccount:
		return fmt.Errorf("%w: field \"type\" is %q, want %q (a machine-user key)", ErrKeyFile, k.Type, KeyTypeServiceAccount)
	case k.KeyID == "":
		return fmt.Errorf("%w: field \"keyId\" is missing", ErrKeyFile)
	case k.Key == "":
		return fmt.Errorf("%w: field \"key\" is missing", ErrKeyFile)
	case k.UserID == "":
		return fmt.Errorf("%w: field \"userId\" is missing", ErrKeyFile)
	}
	return nil
}

// ParseKeyFile parses and validates key file JSON. Errors name the field at
// fault and never contain the private key.
func ParseKeyFile(data []byte) (KeyFile, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		// json errors can quote input bytes: do not wrap the original.
		return KeyFile{}, fmt.Errorf("%w: not a JSON object", ErrKeyFile)
	}
	var k KeyFile
	for _, f := range []struct {
		name string
		dst  *string
	}{{"type", &k.Type}, {"keyId", &k.KeyID}, {"key", &k.Key}, {"userId", &k.UserID}} {
		v, ok := raw[f.name]
		if !ok {
			return KeyFile{}, fmt.Errorf("%w: field %q is missing", ErrKeyFile, f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return KeyFile{}, fmt.Errorf("%w: field %q is not a string", ErrKeyFile, f.name)
		}
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"issuer", &k.Issuer}, {"audience", &k.Audience}, {"device", &k.Device}} {
		if v, ok := raw[f.name]; ok {
			if err := json.Unmarshal(v, f.dst); err != nil {
				return KeyFile{}, fmt.Errorf("%w: field %q is not a string", ErrKeyFile, f.name)
			}
		}
	}
	if err := k.Validate(); err != nil {
		return KeyFile{}, err
	}
	if _, err := signerFor(k); err != nil {
		return KeyFile{}, err
	}
	return k, nil
}

// ReadKeyFile reads and parses a key file.
func ReadKeyFile(path string) (KeyFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return KeyFile{}, fmt.Errorf("credential: read key file: %w", err)
	}
	k, err := ParseKeyFile(data)
	if err != nil {
		return KeyFile{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// Marshal encodes the key file as Zitadel writes it, plus Fleet's optional
// issuer, audience and device when set.
func (k KeyFile) Marshal() ([]byte, error) {
	return json.Marshal(struct {
		Type     string `json:"type"`
		KeyID    string `json:"keyId"`
		Key      string `json:"key"`
		UserID   string `json:"userId"`
		Issuer   string `json:"issuer,omitempty"`
		Audience string `json:"audience,omitempty"`
		Device   string `json:"device,omitempty"`
	}(k))
}

// WriteKeyFile writes the key file with mode 0600, replacing any file at path
// atomically (write to a temporary file in the same folder, then rename).
func WriteKeyFile(path string, k KeyFile) error {
	if err := k.Validate(); err != nil {
		return err
	}
	data, err := k.Marshal()
	if err != nil {
		return fmt.Errorf("credential: encode key file: %w", err)
	}
	f, err := os.CreateTemp(dirOf(path), ".keyfile-*")
	if err != nil {
		return fmt.Errorf("credential: write key file: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("credential: write key file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("credential: write key file: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("credential: write key file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("credential: write key file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("credential: write key file: %w", err)
	}
	return nil
}

func dirOf(path string) string {
	for i := len(path) - 1; i >= 0; i-- {
		if os.IsPathSeparator(path[i]) {
			if i == 0 {
				return path[:1]
			}
			return path[:i]
		}
	}
	return "."
}
