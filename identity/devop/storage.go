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

// storage implements op.Storage over the Provider's users, keys, web
// clients and authorization requests: the JWT-profile grant, discovery,
// JWKS, the authorization code flow (with userinfo and end_session). Every
// other flow (refresh, client credentials, introspection, revocation)
// answers ErrNotSupported.
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

// CreateAccessToken issues an access token id. A human user's token is
// kept (until it expires) for userinfo; a machine user's is not.
func (s *storage) CreateAccessToken(_ context.Context, req op.TokenRequest) (string, time.Time, error) {
	id, exp := newID(), s.p.now().Add(s.p.lifetime)
	if ar, ok := req.(*authRequest); ok {
		s.p.storeAccessToken(id, accessToken{subject: ar.subject, clientID: ar.clientID, expires: exp})
	}
	return id, exp, nil
}

// SetUserinfoFromRequest asserts the user's roles in the id_token, as a
// Zitadel project with "assert roles on authentication" does.
// For a human user it also sets preferred_username, name and email.
func (s *storage) SetUserinfoFromRequest(_ context.Context, ui *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	s.p.setUserinfo(ui, req.GetSubject())
	return nil
}

// setUserinfo sets the claims of a user: the subject, the roles (as
// Zitadel asserts project roles) and, for a human user, the profile and
// email claims.
func (p *Provider) setUserinfo(ui *oidc.UserInfo, subject string) {
	ui.Subject = subject
	if h, ok := p.human(subject); ok {
		ui.PreferredUsername = h.name
		ui.Name = h.name
		ui.Email = h.email()
		ui.EmailVerified = true
	}
	roles := p.rolesOf(subject)
	if len(roles) == 0 {
		return
	}
	m := make(map[string]map[string]string, len(roles))
	for _, r := range roles {
		m[r] = map[string]string{devOrgID: devOrgDomain}
	}
	ui.AppendClaims(RolesClaim, m)
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

// CreateAuthRequest stores an authorization request. op has checked the
// client, the exact redirect_uri, the scopes and the response type;
// server.Authorize has required PKCE with S256.
func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	return s.p.newAuthRequest(r), nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	return s.p.authRequestByID(id)
}

// AuthRequestByCode redeems a code: it answers once per code.
func (s *storage) AuthRequestByCode(_ context.Context, code string) (op.AuthRequest, error) {
	return s.p.redeemCode(code)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	return s.p.saveAuthCode(id, code)
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.p.deleteAuthRequest(id)
	return nil
}

// TerminateSession ends a user's sign-in at a client: the provider keeps
// no single sign-on session (every authorization asks for the password),
// so this drops the access tokens userinfo would answer.
func (s *storage) TerminateSession(_ context.Context, userID, clientID string) error {
	s.p.endSessions(userID, clientID)
	return nil
}

func (s *storage) GetClientByClientID(_ context.Context, clientID string) (op.Client, error) {
	if c, ok := s.p.webClient(clientID); ok {
		return c, nil
	}
	return nil, oidc.ErrInvalidClient().WithDescription("unknown client_id").WithParent(notSupported("client " + strings.TrimSpace(clientID)))
}

// AuthorizeClientIDSecret authenticates a confidential web client.
func (s *storage) AuthorizeClientIDSecret(_ context.Context, clientID, secret string) error {
	if c, ok := s.p.webClient(clientID); ok && c.secretMatches(secret) {
		return nil
	}
	return oidc.ErrInvalidClient().WithDescription("client authentication failed")
}

// SetUserinfoFromToken answers userinfo for a live access token of a human
// user.
func (s *storage) SetUserinfoFromToken(_ context.Context, ui *oidc.UserInfo, tokenID, subject, _ string) error {
	if _, ok := s.p.accessTokenOf(tokenID, subject); !ok {
		return oidc.ErrAccessDenied().WithDescription("access token unknown or expired")
	}
	s.p.setUserinfo(ui, subject)
	return nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, notSupported("refresh tokens")
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, notSupported("refresh tokens")
}
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrUnsupportedGrantType().WithDescription("token revocation is not supported: remove the machine key")
}
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return notSupported("introspection")
}
