#!/usr/bin/env bash
# setup-browser.sh installs the browser the dashboard's browser tests drive
# (internal/testenv/browser): Debian's chromium, run headless, and a font
# with metrics-compatible Latin faces so screenshots read the same on every
# machine. Nothing is downloaded outside apt: no test tool fetches a browser
# of its own.
#
# Idempotent: a machine that has the packages only checks that chromium
# starts (`chromium --version`). Uses sudo for apt only when not root.
#
# Usage: scripts/setup-browser.sh [--check]
#   --check  install nothing: exit 1, naming what is missing, when the
#            packages are not installed or chromium does not start.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PACKAGES=(chromium fonts-liberation)

log() { printf 'setup:browser: %s\n' "$*"; }

check_only=""
case "${1:-}" in
"") ;;
--check) check_only=1 ;;
*)
	echo "setup:browser: unknown argument ${1}: the only option is --check" >&2
	exit 2
	;;
esac

if ! command -v dpkg-query >/dev/null 2>&1; then
	if command -v chromium >/dev/null 2>&1; then
		log "not Debian; using $(command -v chromium)"
		exit 0
	fi
	echo "setup:browser: chromium is missing and this is not Debian: install Chromium with this system's package manager so that \`chromium\` is on PATH" >&2
	exit 1
fi

mapfile -t missing < <(missing_packages "${PACKAGES[@]}")
if (( ${#missing[@]} )); then
	if [[ -n "$check_only" ]]; then
		echo "setup:browser: not installed: ${missing[*]}; run \`go tool -modfile=tools/go.mod task setup:browser\`" >&2
		exit 1
	fi
	if ! install_packages "${PACKAGES[@]}"; then
		echo "setup:browser: ${missing[*]} could not be installed (see above)" >&2
		exit 1
	fi
fi

if ! command -v chromium >/dev/null 2>&1; then
	echo "setup:browser: the chromium package is installed but \`chromium\` is not on PATH ($PATH)" >&2
	exit 1
fi
# --version starts the wrapper and the binary without a display. (Debian's
# wrapper prints a harmless shell warning on some machines: stderr is shown
# only when it fails.)
errs="$(mktemp)"
if ! version="$(chromium --version 2>"$errs")"; then
	echo "setup:browser: chromium does not start (chromium --version):" >&2
	cat "$errs" >&2
	rm -f "$errs"
	exit 1
fi
rm -f "$errs"
log "$version"
