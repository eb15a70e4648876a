package baostandin

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// transitMount is a transit secrets engine holding only what Fleet uses:
// ecdsa-p256 keys that sign, never export.
type transitMount struct {
	keys map[string]*transitKey
}

// transitKey is a named key: its versions, versions[i] is version i+1.
type transitKey struct {
	name     string
	versions []transitVersion
}

type transitVersion struct {
	priv    *ecdsa.PrivateKey
	pubPEM  string
	created time.Time
}

func newTransitMount() *transitMount { return &transitMount{keys: map[string]*transitKey{}} }

func newTransitVersion(now time.Time) (transitVersion, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return transitVersion{}, err
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		return transitVersion{}, err
	}
	return transitVersion{priv: priv, pubPEM: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), created: now}, nil
}

// info is OpenBao's key description (formatKeyPolicy): the public key of
// every version, never private material.
func (k *transitKey) info() map[string]any {
	keys := map[string]any{}
	for i, v := range k.versions {
		keys[strconv.Itoa(i+1)] = map[string]any{
			"name": "P-256", "public_key": v.pubPEM, "creation_time": v.created.UTC().Format(time.RFC3339Nano),
		}
	}
	return map[string]any{
		"name": k.name, "type": "ecdsa-p256", "derived": false, "deletion_allowed": false,
		"min_available_version": 0, "min_decryption_version": 1, "min_encryption_version": 0,
		"latest_version": len(k.versions), "exportable": false, "allow_plaintext_backup": false,
		"supports_encryption": false, "supports_decryption": false, "supports_signing": true,
		"supports_derivation": false, "auto_rotate_period": 0, "imported_key": false, "keys": keys,
	}
}

// transitOp serves <mount>/keys/<name>[/rotate], <mount>/sign/<name>[/<hash>]
// and <mount>/export/<type>/<name>[/<version>]. The capability checked is
// OpenBao's: these paths have no existence check, so a write is update.
func (s *Server) transitOp(t *token, tm *transitMount, mount, rest, op string, body map[string]any) (reply, error) {
	full := mount + "/" + rest
	segs := strings.Split(rest, "/")
	notFound := fail(http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", full))
	capName := map[string]string{"read": "read", "write": "update", "delete": "delete", "list": "list"}[op]
	if !s.can(t, full, capName) {
		return reply{}, errDenied
	}
	switch {
	case segs[0] == "keys" && len(segs) == 2 && segs[1] != "":
		k := tm.keys[segs[1]]
		switch op {
		case "read":
			if k == nil {
				return reply{}, fail(http.StatusNotFound)
			}
			return reply{data: k.info()}, nil
		case "write":
			if k != nil {
				return reply{data: k.info()}, nil // OpenBao warns "key … already existed"
			}
			typ, _ := body["type"].(string)
			if typ == "" {
				typ = "aes256-gcm96"
			}
			if typ != "ecdsa-p256" {
				return reply{}, fail(http.StatusBadRequest, fmt.Sprintf("the OpenBao stand-in's transit engine supports only type ecdsa-p256 keys, not %q", typ))
			}
			if e, _ := body["exportable"].(bool); e {
				return reply{}, fail(http.StatusBadRequest, "the OpenBao stand-in's transit engine makes no exportable keys")
			}
			v, err := newTransitVersion(s.now())
			if err != nil {
				return reply{}, err
			}
			k = &transitKey{name: segs[1], versions: []transitVersion{v}}
			tm.keys[segs[1]] = k
			return reply{data: k.info()}, nil
		}
	case segs[0] == "keys" && len(segs) == 3 && segs[2] == "rotate" && op == "write":
		k := tm.keys[segs[1]]
		if k == nil {
			return reply{}, fail(http.StatusBadRequest, "key not found")
		}
		v, err := newTransitVersion(s.now())
		if err != nil {
			return reply{}, err
		}
		k.versions = append(k.versions, v)
		return reply{data: k.info()}, nil
	case segs[0] == "sign" && (len(segs) == 2 || len(segs) == 3) && op == "write":
		return transitSign(tm.keys[segs[1]], segs[2:], body)
	case segs[0] == "export" && (len(segs) == 3 || len(segs) == 4) && op == "read":
		if tm.keys[segs[2]] == nil {
			return reply{}, fail(http.StatusNotFound)
		}
		return reply{}, fail(http.StatusBadRequest, "private key material is not exportable")
	}
	return reply{}, notFound
}

// transitSign signs body.input (base64) with the key's latest version (or
// key_version): ECDSA over its SHA-256, ASN.1, as
// "vault:v<N>:<base64>".
func transitSign(k *transitKey, urlHash []string, body map[string]any) (reply, error) {
	if k == nil {
		return reply{}, fail(http.StatusBadRequest, "signing key not found")
	}
	hash, _ := body["hash_algorithm"].(string)
	if len(urlHash) == 1 {
		hash = urlHash[0]
	}
	if hash == "" {
		hash = "sha2-256"
	}
	if hash != "sha2-256" {
		return reply{}, fail(http.StatusBadRequest, fmt.Sprintf("the OpenBao stand-in's transit engine signs with hash_algorithm sha2-256 only, not %q", hash))
	}
	if m, _ := body["marshaling_algorithm"].(string); m != "" && m != "asn1" {
		return reply{}, fail(http.StatusBadRequest, fmt.Sprintf("the OpenBao stand-in's transit engine marshals signatures as asn1 only, not %q", m))
	}
	if p, _ := body["prehashed"].(bool); p {
		return reply{}, fail(http.StatusBadRequest, "the OpenBao stand-in's transit engine does not sign prehashed input")
	}
	raw, ok := body["input"].(string)
	if !ok {
		return reply{}, fail(http.StatusBadRequest, "missing input")
	}
	input, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return reply{}, fail(http.StatusBadRequest, "unable to decode input: "+err.Error())
	}
	ver := len(k.versions)
	if v, ok := body["key_version"]; ok {
		n, _ := v.(float64)
		if int(n) < 1 || int(n) > len(k.versions) {
			return reply{}, fail(http.StatusBadRequest, "requested version for signing is less than the minimum encryption key version or greater than the latest version")
		}
		ver = int(n)
	}
	sum := sha256.Sum256(input)
	sig, err := ecdsa.SignASN1(rand.Reader, k.versions[ver-1].priv, sum[:])
	if err != nil {
		return reply{}, err
	}
	return reply{data: map[string]any{
		"signature":   "vault:v" + strconv.Itoa(ver) + ":" + base64.StdEncoding.EncodeToString(sig),
		"key_version": ver,
	}}, nil
}
