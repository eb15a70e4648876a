// Package scripts holds the shell scripts that install and start what the
// tests, lint and `fleet dev` need on a Debian 12 machine (setup-podman.sh,
// setup-k8s.sh, setup-natscli.sh, setup-promtool.sh, setup-lint.sh, stop.sh, their helpers in
// lib.sh, and check-fresh-debian.sh, which runs setup-podman.sh's package
// step in a fresh Debian 12 root) and the Go tests of those scripts:
// package detection and installation on a machine where dpkg has never
// heard of the packages, apt failures, and shellcheck over every script. It
// has no Go API; nothing imports it.
package scripts
