package devop

import (
	"context"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// storage implements op.Storage over the Provider's users and keys. Only the
// methods the JWT-profile grant, discovery and JWKS use do anything; every
// other flow answers ErrNotSupported.
type storage struct{ p *Provider }

var _ op.Storage = (*storage)(nil)
var _ op.CanSetUserinfoFromRequest = (*storage)(nil)

const projectAudPrefix, projectAudSuffix = "urn:zitadel:iam:org:project:id:", ":aud"

func (s *storage) GetKeyByIDAndClientID(_ context.Context, keyID, clientID string) (*jose.JSONWebKey, error) {
	return s.p.publicKey(keyID, clientID)
}

// ValidateJWTProfileScopes keeps openid, the roles scope and the audience
// scope of the provider's own project; other scopes are dropped. Unknown
// users are refused.
func (s *storage) ValidateJWTProfileScopes(_ context.Context, userID string, scopes []string) ([]string, error) {
	s.p.mu.Lock()
	_, ok := s.p.users[userID]
	s.p.mu.Unlock()
	if !ok {
		return nil, oidc.ErrInvalidGrant().WithDescription("unknown user")
	}
	var out []string
	for _, sc := range scopes {
		switch {
		case sc == oidc.ScopeOpenID, sc == RolesClaim:
			out = append(out, sc)
		case sc == projectAudPrefix+s.p.audience+projectAudSuffix:
			out = append(out, sc)
		}
	}
	return out, nil
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return s.p.signing, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	keys := make([]op.Key, 0, len(s.p.verify))
	for _, k := range s.p.verify {
		keys = append(keys, publicKey{k})
	}
	return keys, nil
}

func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	return newID(), s.p.now().Add(s.p.lifetime), nil
}

// SetUserinfoFromRequest asserts the user's roles in the id_token, as a
// Zitadel project with "assert roles on authentication" does.
func (s *storage) SetUserinfoFromRequest(_ context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	ui.Subject = req.GetSubject()
	roles := s.p.rolesOf(req.GetSubject())
	if len(roles) == 0 {
		return nil
	}
	m := make(map[string]map[string]string, len(roles))
	for _, r := range roles {
		m[r] = map[string]string{devOrgID: devOrgDomain}
	}
	ui.AppendClaims(RolesClaim, m)
	return nil
}

func (s *storage) SetUserinfoFromScopes(_ context.Context, ui *oidc.UserInfo, userID, _ string, _ []string) error {
	ui.Subject = userID
	return nil
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}

func (s *storage) Health(context.Context) error { return nil }

func notSupported(what string) error { return fmt.Errorf("%w: %s", ErrNotSupported, what) }

func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, notSupported("authorization requests")
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, notSupported("authorization requests")
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, notSupported("authorization codes")
}
func (s *storage) SaveAuthCode(context.Context, string, string) error {
	return notSupported("authorization codes")
}
func (s *storage) DeleteAuthRequest(context.Context, string) error {
	return notSupported("authorization requests")
}
func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, notSupported("refresh tokens")
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, notSupported("refresh tokens")
}
func (s *storage) TerminateSession(context.Context, string, string) error {
	return notSupported("sessions")
}
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrUnsupportedGrantType().WithDescription("token revocation is not supported: remove the machine key")
}
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}
func (s *storage) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	return nil, notSupported("client " + strings.TrimSpace(clientID))
}
func (s *storage) AuthorizeClientIDSecret(context.Context, string, string) error {
	return notSupported("client secrets")
}
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return notSupported("userinfo")
}
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return notSupported("introspection")
}
