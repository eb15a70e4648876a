package devop

import (
	"errors"
	"slices"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// Lifetimes of the authorization code flow's state.
const (
	// authRequestLifetime bounds the time from the authorization request
	// to the code: the user signs in within it.
	authRequestLifetime = 10 * time.Minute
	// codeLifetime bounds the time from the code to its exchange.
	codeLifetime = time.Minute
)

var (
	errUnknownAuthRequest = errors.New("devop: unknown, finished or expired authorization request")
	errUnknownCode        = errors.New("devop: unknown, used or expired authorization code")
)

// authRequest is one authorization request of the code flow, from
// /authorize to the code exchange. It implements op.AuthRequest; op gets
// copies.
type authRequest struct {
	id           string
	clientID     string
	redirectURI  string
	state        string
	nonce        string
	scopes       []string
	responseType oidc.ResponseType
	responseMode oidc.ResponseMode
	challenge    *oidc.CodeChallenge
	audience     []string
	expires      time.Time // of the request (before the code), then of the code

	subject  string // set by a successful sign-in
	authTime time.Time
	done     bool
	code     string // set once: a request yields at most one code
}

var _ op.AuthRequest = (*authRequest)(nil)

func (a *authRequest) GetID() string                         { return a.id }
func (a *authRequest) GetACR() string                        { return "" }
func (a *authRequest) GetAMR() []string                      { return []string{"pwd"} }
func (a *authRequest) GetAudience() []string                 { return a.audience }
func (a *authRequest) GetAuthTime() time.Time                { return a.authTime }
func (a *authRequest) GetClientID() string                   { return a.clientID }
func (a *authRequest) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authRequest) GetNonce() string                      { return a.nonce }
func (a *authRequest) GetRedirectURI() string                { return a.redirectURI }
func (a *authRequest) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authRequest) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authRequest) GetScopes() []string                   { return a.scopes }
func (a *authRequest) GetState() string                      { return a.state }
func (a *authRequest) GetSubject() string                    { return a.subject }
func (a *authRequest) Done() bool                            { return a.done }

func (a *authRequest) clone() *authRequest {
	c := *a
	c.scopes = slices.Clone(a.scopes)
	c.audience = slices.Clone(a.audience)
	if a.challenge != nil {
		ch := *a.challenge
		c.challenge = &ch
	}
	return &c
}

// accessToken is an issued access token of a human user, kept for the
// userinfo endpoint.
type accessToken struct {
	subject  string
	clientID string
	expires  time.Time
}

// newAuthRequest stores an authorization request and returns a copy.
func (p *Provider) newAuthRequest(r *oidc.AuthRequest) *authRequest {
	a := &authRequest{
		id:           newID() + newID(),
		clientID:     r.ClientID,
		redirectURI:  r.RedirectURI,
		state:        r.State,
		nonce:        r.Nonce,
		scopes:       slices.Clone(r.Scopes),
		responseType: r.ResponseType,
		responseMode: r.ResponseMode,
		challenge:    &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod},
		audience:     []string{p.audience},
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	a.expires = now.Add(authRequestLifetime)
	p.pruneLocked(now)
	p.authRequests[a.id] = a
	return a.clone()
}

// pruneLocked drops expired authorization requests and access tokens.
// p.mu is held.
func (p *Provider) pruneLocked(now time.Time) {
	for id, a := range p.authRequests {
		if now.After(a.expires) {
			delete(p.authRequests, id)
		}
	}
	for id, t := range p.tokens {
		if now.After(t.expires) {
			delete(p.tokens, id)
		}
	}
}

// authRequestByID returns a copy of a pending (no code yet) request.
func (p *Provider) authRequestByID(id string) (*authRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.authRequests[id]
	if !ok || a.code != "" || p.now().After(a.expires) {
		return nil, errUnknownAuthRequest
	}
	return a.clone(), nil
}

// completeAuthRequest records a successful sign-in of userID.
func (p *Provider) completeAuthRequest(id, userID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.authRequests[id]
	now := p.now()
	if !ok || a.done || a.code != "" || now.After(a.expires) {
		return errUnknownAuthRequest
	}
	a.subject, a.authTime, a.done = userID, now, true
	return nil
}

// saveAuthCode attaches the code to a signed-in request: once per request.
func (p *Provider) saveAuthCode(id, code string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.authRequests[id]
	now := p.now()
	if !ok || !a.done || a.code != "" || now.After(a.expires) {
		return errUnknownAuthRequest
	}
	a.code = code
	a.expires = now.Add(codeLifetime)
	return nil
}

// redeemCode returns the request a code was issued for and makes the code
// unusable: a code is exchanged at most once, even when the exchange then
// fails (wrong code_verifier).
func (p *Provider) redeemCode(code string) (*authRequest, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, a := range p.authRequests {
		if a.code == "" || a.code != code {
			continue
		}
		delete(p.authRequests, id)
		if p.now().After(a.expires) {
			return nil, errUnknownCode
		}
		return a, nil
	}
	return nil, errUnknownCode
}

func (p *Provider) deleteAuthRequest(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.authRequests, id)
}

// storeAccessToken keeps a human user's access token for userinfo.
func (p *Provider) storeAccessToken(id string, t accessToken) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tokens[id] = t
}

// accessTokenOf returns a live access token issued to subject.
func (p *Provider) accessTokenOf(id, subject string) (accessToken, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.tokens[id]
	if !ok || t.subject != subject || p.now().After(t.expires) {
		return accessToken{}, false
	}
	if _, ok := p.humans[subject]; !ok {
		return accessToken{}, false
	}
	return t, true
}

// endSessions drops the access tokens userID holds for clientID.
func (p *Provider) endSessions(userID, clientID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, t := range p.tokens {
		if t.subject == userID && (clientID == "" || t.clientID == clientID) {
			delete(p.tokens, id)
		}
	}
}
