// Package dashboardui holds the operator's web dashboard's browser tests:
// Debian's Chromium, driven from Go (internal/testenv/browser), signs in
// through the development OpenID Provider and uses the dashboard of a whole
// fleet dev (package dev: the operator, NATS with the auth callout,
// kube-apiserver and simulated agents), and axe-core checks every page. It
// has no code of its own; nothing imports it.
package dashboardui
