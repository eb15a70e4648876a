#!/usr/bin/env bash
# setup-promtool.sh builds promtool (the Prometheus version
# tools/promtool/go.mod pins) once into the path given, from the Go module
# proxy. The alert rule tests in deploy/prometheus run it.
#
# Usage: scripts/setup-promtool.sh OUTPUT-PATH
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/setup-promtool.sh OUTPUT-PATH}"

if [[ -x "$out" ]]; then
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "setup:promtool: go is not on PATH; install Go 1.26 (https://go.dev/dl/) and re-run" >&2
	exit 1
fi
echo "setup:promtool: building promtool into ${out#"$ROOT"/} (first time only; a large build, several minutes cold)"
mkdir -p "$(dirname "$out")"
if ! CGO_ENABLED=0 go -C "$ROOT/tools/promtool" build -tags remove_all_sd -o "$out.tmp" github.com/prometheus/prometheus/cmd/promtool; then
	rm -f "$out.tmp"
	{
		echo "setup:promtool: building promtool failed; go's error is above."
		echo "  - 'go: downloading' errors or 'dial tcp': this machine must reach the Go module proxy ($(go env GOPROXY))."
		echo "  - 'no space left on device': free space for the Go build cache ($(go env GOCACHE)) and .cache/."
		echo "  - 'signal: killed': the build ran out of memory; close other builds or set GOMAXPROCS=1 and re-run."
		echo "  Then re-run: go tool -modfile=tools/go.mod task setup:promtool"
	} >&2
	exit 1
fi
mv -f "$out.tmp" "$out"
