#!/usr/bin/env bash
# setup-lint.sh installs the Debian packages the lint checks need
# (shellcheck, for every script under scripts/ and .ci/). Idempotent: a
# machine that has them only checks.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if ! command -v dpkg-query >/dev/null 2>&1; then
	if command -v shellcheck >/dev/null 2>&1; then
		exit 0
	fi
	echo "setup:lint: shellcheck is missing and this is not Debian: install shellcheck with this system's package manager" >&2
	exit 1
fi
if ! install_packages shellcheck; then
	echo "setup:lint: shellcheck could not be installed (see above)" >&2
	exit 1
fi
