package dashboard

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// SessionKeySize is the size of the session key: an AES-256 key.
const SessionKeySize = 32

// User is a signed-in user as the dashboard records them.
type User struct {
	// Subject is the id_token's sub claim; Name its preferred_username,
	// else name, else sub.
	Subject string `json:"sub"`
	Name    string `json:"name"`
	// Admin is true when the id_token carried the fleet-admin role;
	// Viewer when it carried fleet-viewer (read-only: every page, no
	// action).
	Admin  bool `json:"admin"`
	Viewer bool `json:"viewer,omitempty"`
	// KubeUser and KubeGroups are the user's Kubernetes identity, mapped
	// from the id_token as the API server maps it (KubeIdentity): the
	// dashboard writes to Kubernetes impersonating them, so the API
	// server records the user and RBAC decides. KubeUser is "" when the
	// token lacks the username claim: the user's Kubernetes writes are
	// refused.
	KubeUser   string   `json:"kubeUser,omitempty"`
	KubeGroups []string `json:"kubeGroups,omitempty"`
}

// SeesPages reports whether the user may see the dashboard's pages: the
// fleet-admin or the fleet-viewer role.
func (u User) SeesPages() bool { return u.Admin || u.Viewer }

// ParseSessionKey reads a session key file's content: exactly
// SessionKeySize bytes, or that many bytes written as hex or base64 on one
// line. The error never quotes the content.
func ParseSessionKey(raw []byte) ([]byte, error) {
	if len(raw) == SessionKeySize {
		return raw, nil
	}
	text := strings.TrimSpace(string(raw))
	if b, err := hex.DecodeString(text); err == nil && len(b) == SessionKeySize {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(text); err == nil && len(b) == SessionKeySize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: a session key is %d random bytes, raw or as hex or base64 (head -c 32 /dev/urandom | base64 > session.key); this is %d bytes of something else",
		ErrInvalidOptions, SessionKeySize, len(raw))
}

// session is what the session cookie holds, sealed: nobody without the key
// can read or forge it.
type session struct {
	// ID names the session (logout revokes it).
	ID   string `json:"id"`
	User User   `json:"user"`
	// CSRF is the synchronizer token every form of the session carries.
	CSRF    string    `json:"csrf"`
	Expires time.Time `json:"exp"`
}

// loginState is what the sign-in cookie holds between /login and
// /callback, sealed.
type loginState struct {
	State    string    `json:"state"`
	Nonce    string    `json:"nonce"`
	Verifier string    `json:"verifier"`
	Return   string    `json:"return"`
	Expires  time.Time `json:"exp"`
}

// sealer seals and opens cookie values with AES-256-GCM. The cookie's name
// is the additional data, so a value sealed for one cookie does not open as
// another.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != SessionKeySize {
		return nil, fmt.Errorf("%w: the session key has %d bytes; it must have %d (32 random bytes, e.g. head -c 32 /dev/urandom > session.key)",
			ErrInvalidOptions, len(key), SessionKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: session key: %v", ErrInvalidOptions, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: session key: %v", ErrInvalidOptions, err)
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(name string, v any) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(name))), nil
}

var errBadCookie = errors.New("cookie does not open")

func (s *sealer) open(name, value string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return errBadCookie
	}
	plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], []byte(name))
	if err != nil {
		return errBadCookie
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return errBadCookie
	}
	return nil
}

// randomToken returns 32 random bytes, base64url.
func randomToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("dashboard: no randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// equalToken compares two tokens in constant time.
func equalToken(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// cookies names and writes the dashboard's cookies: with the __Host- prefix
// and Secure when the public URL is https, plain names without Secure on a
// plain-http loopback URL (development only; Options.Validate refuses plain
// http elsewhere).
type cookies struct {
	secure bool
	sealer *sealer
}

func (c cookies) name(base string) string {
	if c.secure {
		return "__Host-" + base
	}
	return base
}

const (
	sessionCookie = "fleet_session"
	loginCookie   = "fleet_login"
)

func (c cookies) set(w http.ResponseWriter, base string, v any, expires time.Time) error {
	name := c.name(base)
	val, err := c.sealer.seal(name, v)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{Name: name, Value: val, Path: "/", Expires: expires, MaxAge: int(time.Until(expires).Seconds()),
		Secure: c.secure, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	return nil
}

func (c cookies) clear(w http.ResponseWriter, base string) {
	http.SetCookie(w, &http.Cookie{Name: c.name(base), Value: "", Path: "/", MaxAge: -1, Secure: c.secure, HttpOnly: true, SameSite: http.SameSiteLaxMode})
}

func (c cookies) get(r *http.Request, base string, v any) error {
	name := c.name(base)
	ck, err := r.Cookie(name)
	if err != nil {
		return err
	}
	return c.sealer.open(name, ck.Value, v)
}

// revoked holds the ids of sessions signed out before they expired, until
// they expire. It is in memory: a restart forgets it, so a sealed cookie
// copied before a logout would open again after a restart until it
// expires (docs/dashboard.md, "Sessions").
type revoked struct {
	mu sync.Mutex
	// ids maps a revoked session id to its expiry; guarded by mu.
	ids map[string]time.Time
}

func (r *revoked) add(id string, exp time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids = map[string]time.Time{}
	}
	now := time.Now()
	for k, e := range r.ids {
		if e.Before(now) {
			delete(r.ids, k)
		}
	}
	r.ids[id] = exp
}

func (r *revoked) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.ids[id]
	return ok
}
