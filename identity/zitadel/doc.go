// Package zitadel is a client for the part of Zitadel's management API
// (REST, /management/v1) that enrollment needs: create (or find) a machine
// user, grant it project roles, add, list and remove its JSON keys. It
// authenticates with a personal access token of a user allowed to manage
// machine users. The development provider (identity/devop) serves the same
// endpoints, so `fleet enroll` works against `fleet dev` and Zitadel alike.
//
// Only the request and response fields listed here are relied on; they
// follow Zitadel's published management API v1. The package is tested
// against the development provider only (no Zitadel server runs here).
//
// Imported by cmd/fleet and tests; it never links Kubernetes.
package zitadel
