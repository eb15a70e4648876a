package openbao

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultTransitMount is where the transit secrets engine is usually
// enabled.
const DefaultTransitMount = "transit"

// ErrTransit: a transit answer is not what OpenBao's API documents (no
// signature, a malformed one, a key without public keys).
var ErrTransit = errors.New("openbao: unexpected transit answer")

// EnableTransit enables the transit secrets engine at mount (an
// administrator's call; sudo on sys/mounts).
func (c *Client) EnableTransit(ctx context.Context, mount string) error {
	path := "sys/mounts/" + strings.Trim(mount, "/")
	if _, err := c.api.Logical().WriteWithContext(ctx, path, map[string]any{"type": "transit"}); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// TransitCreateKey creates the ecdsa-p256 signing key name at mount, not
// exportable (an administrator's call). An existing key is kept.
func (c *Client) TransitCreateKey(ctx context.Context, mount, name string) error {
	path := strings.Trim(mount, "/") + "/keys/" + name
	if _, err := c.api.Logical().WriteWithContext(ctx, path, map[string]any{"type": "ecdsa-p256"}); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// TransitRotate adds a new version to the key name at mount; signatures
// are then made with it (an administrator's call).
func (c *Client) TransitRotate(ctx context.Context, mount, name string) error {
	path := strings.Trim(mount, "/") + "/keys/" + name + "/rotate"
	if _, err := c.api.Logical().WriteWithContext(ctx, path, nil); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// TransitPublicKeys reads the key name at mount and returns the PEM public
// key of each of its versions (version → PEM). It needs read on
// <mount>/keys/<name>; the answer holds no private material.
func (c *Client) TransitPublicKeys(ctx context.Context, mount, name string) (map[int]string, error) {
	path := strings.Trim(mount, "/") + "/keys/" + name
	s, err := c.api.Logical().ReadWithContext(ctx, path)
	if err != nil {
		return nil, classify("read", path, err)
	}
	if s == nil || s.Data == nil {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, path)
	}
	var d struct {
		Type string `json:"type"`
		Keys map[string]struct {
			PublicKey string `json:"public_key"`
		} `json:"keys"`
	}
	b, _ := json.Marshal(s.Data)
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%w: %s: field keys: %w", ErrTransit, path, err)
	}
	out := map[int]string{}
	for v, k := range d.Keys {
		n, err := strconv.Atoi(v)
		if err != nil || k.PublicKey == "" {
			return nil, fmt.Errorf("%w: %s: version %q has no public_key (type %q: want an asymmetric key such as ecdsa-p256)", ErrTransit, path, v, d.Type)
		}
		out[n] = k.PublicKey
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s: no key versions", ErrTransit, path)
	}
	return out, nil
}

// TransitSign signs input with the latest version of the key name at mount
// (SHA-256, ASN.1 marshaling) and returns the DER signature and the key
// version that made it. It needs update on <mount>/sign/<name>.
func (c *Client) TransitSign(ctx context.Context, mount, name string, input []byte) ([]byte, int, error) {
	path := strings.Trim(mount, "/") + "/sign/" + name
	s, err := c.api.Logical().WriteWithContext(ctx, path, map[string]any{
		"input": base64.StdEncoding.EncodeToString(input), "hash_algorithm": "sha2-256", "marshaling_algorithm": "asn1",
	})
	if err != nil {
		return nil, 0, classify("write", path, err)
	}
	if s == nil || s.Data == nil {
		return nil, 0, fmt.Errorf("%w: %s: no data", ErrTransit, path)
	}
	raw, _ := s.Data["signature"].(string)
	rest, ok := strings.CutPrefix(raw, "vault:v")
	ver, b64, ok2 := strings.Cut(rest, ":")
	n, err := strconv.Atoi(ver)
	if !ok || !ok2 || err != nil || n < 1 {
		return nil, 0, fmt.Errorf("%w: %s: field signature is not vault:v<N>:<base64>", ErrTransit, path)
	}
	sig, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: field signature: %w", ErrTransit, path, err)
	}
	return sig, n, nil
}
