// Package identity groups Fleet's OpenID Connect identity code: the device
// credential (package credential, imported by the agent and so free of
// Kubernetes), the development OpenID Provider (package devop, for tests and
// `fleet dev`, never production), the Zitadel management client used by
// enrollment (package zitadel) and `fleet token`'s diagnosis of a device's
// credential as the auth callout would judge it (package tokencheck). This
// package itself holds only this comment; nothing imports it.
package identity
