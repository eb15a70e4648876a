// Package devop is Fleet's development OpenID Provider: an in-process
// provider built on zitadel/oidc/v3 pkg/op that serves discovery, JWKS and
// the OAuth 2.0 JWT-profile grant, and — as Zitadel does for machine users —
// issues an id_token (created with op.CreateIDToken) when scope openid is
// requested. It holds machine users with their keys and roles in memory
// and, given a state file (Options.StateFile: public keys only, mode
// 0600), keeps them across restarts; it revokes keys, rotates its signing
// key and has a configurable token lifetime.
//
// For the dashboard in `fleet dev` it also signs in human users as Zitadel
// does: the authorization code flow for registered web clients
// (RegisterWebClient) with PKCE S256 required of every client, a login
// page of its own (/login: user name and password, CreateHumanUser; the
// password is kept only as a bcrypt hash and never logged), id_tokens with
// the same roles claim plus preferred_username, name and email, userinfo
// and end_session. Authorization requests expire after 10 minutes, codes
// after one minute, and a code is redeemed once. There are no refresh
// tokens and no single sign-on session.
//
// It exists for tests and `fleet dev` only. It is NOT for production:
// production uses Zitadel. Nothing here is a token shortcut: every token
// comes out of the same grant a device (or, for a person, the dashboard)
// performs against Zitadel.
//
// Logging: devop's own records go to Options.Logger; zitadel/oidc's op
// package logs route registration and request errors through slog.Default
// and offers no per-provider logger (its WithLogger option is a no-op), so
// those records follow the process default.
//
// The one-machine control plane (controlplane), `fleet dev`
// (package dev, which also enrolls its devices with it), the scale
// benchmark (package bench), the tests' chain (internal/callouttest)
// and tests may import it; no other package, so no production binary but
// cmd/fleet, links it (internal/hygiene checks). The agent and the auth
// callout talk to any provider over HTTP.
package devop
