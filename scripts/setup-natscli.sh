#!/usr/bin/env bash
# setup-natscli.sh builds the nats CLI (the version tools/natscli/go.mod
# pins) once into the path given, from the Go module proxy. The docs' nats
# recipes and `fleet dev`'s printed next steps use it.
#
# Usage: scripts/setup-natscli.sh OUTPUT-PATH
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/setup-natscli.sh OUTPUT-PATH}"

if [[ -x "$out" ]]; then
	exit 0
fi
if ! command -v go >/dev/null 2>&1; then
	echo "setup:natscli: go is not on PATH; install Go 1.26 (https://go.dev/dl/) and re-run" >&2
	exit 1
fi
echo "setup:natscli: building the nats CLI into ${out#"$ROOT"/} (first time only)"
mkdir -p "$(dirname "$out")"
if ! go -C "$ROOT/tools/natscli" build -o "$out.tmp" github.com/nats-io/natscli/nats; then
	rm -f "$out.tmp"
	{
		echo "setup:natscli: building the nats CLI failed; go's error is above."
		echo "  - 'go: downloading' errors or 'dial tcp': this machine must reach the Go module proxy ($(go env GOPROXY))."
		echo "  - 'no space left on device': free space for the Go build cache ($(go env GOCACHE)) and .cache/."
		echo "  Then re-run: go tool -modfile=tools/go.mod task setup:natscli"
	} >&2
	exit 1
fi
mv -f "$out.tmp" "$out"
