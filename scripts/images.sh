#!/usr/bin/env bash
# images.sh builds the control plane's container images with buildah, from
# scratch: fleet-operator (which also serves the dashboard) and
# fleet-authcallout. Each image holds one static binary (CGO_ENABLED=0), the
# CA certificates of this machine (TLS to Zitadel and OpenBao), runs as the
# non-root user 65532 and carries the org.opencontainers.image labels.
#
# Reproducible: the binaries are built with -trimpath, without VCS stamping
# or build id; the files are owned by 0:0 with fixed modes; the image's
# timestamps are SOURCE_DATE_EPOCH (default: the commit time of HEAD). The
# same commit, Go version and CA bundle give the same image id on any
# machine (deploy's test builds twice and compares).
#
# Environment: FLEET_IMAGE_PREFIX (default localhost/harmony-fleet),
# FLEET_IMAGE_TAG (default dev), GOARCH (default the host's),
# SOURCE_DATE_EPOCH, FLEET_IMAGES_OUT (where binaries and the image ids go,
# default .cache/images), FLEET_CA_BUNDLE (default
# /etc/ssl/certs/ca-certificates.crt). Output: one line per image,
# "<reference> <image id> <size in bytes>".
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${FLEET_IMAGES_OUT:-$root/.cache/images}"
prefix="${FLEET_IMAGE_PREFIX:-localhost/harmony-fleet}"
tag="${FLEET_IMAGE_TAG:-dev}"
ca="${FLEET_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
tags="remote exclude_graphdriver_btrfs containers_image_openpgp"

for tool in buildah go git; do
	if ! command -v "$tool" >/dev/null; then
		echo "images: $tool is not installed (buildah: go tool -modfile=tools/go.mod task setup:podman)" >&2
		exit 1
	fi
done
if [[ ! -r "$ca" ]]; then
	echo "images: no CA bundle at $ca: install ca-certificates or set FLEET_CA_BUNDLE" >&2
	exit 1
fi

revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)"
epoch="${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)}"
version="$(git -C "$root" describe --tags --always 2>/dev/null || echo dev)"
mkdir -p "$out"

ctr=""
cleanup() {
	if [[ -n "$ctr" ]]; then
		buildah rm "$ctr" >/dev/null 2>&1 || true
	fi
}
trap cleanup EXIT

for bin in fleet-operator fleet-authcallout; do
	CGO_ENABLED=0 GOOS=linux go build -C "$root" -trimpath -buildvcs=false -tags "$tags" \
		-ldflags "-s -w -buildid= -X main.version=$version" -o "$out/$bin" "./cmd/$bin"
	ctr="$(buildah from --quiet scratch)"
	buildah copy --quiet --chown 0:0 --chmod 0555 "$ctr" "$out/$bin" "/$bin" >/dev/null
	buildah copy --quiet --chown 0:0 --chmod 0444 "$ctr" "$ca" /etc/ssl/certs/ca-certificates.crt >/dev/null
	buildah config --user 65532:65532 --workingdir / --entrypoint "[\"/$bin\"]" --cmd "" \
		--env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
		--label "org.opencontainers.image.title=$bin" \
		--label "org.opencontainers.image.description=Harmony Fleet $bin" \
		--label "org.opencontainers.image.source=https://github.com/nationtech/harmony-fleet" \
		--label "org.opencontainers.image.revision=$revision" \
		--label "org.opencontainers.image.version=$version" \
		--label "org.opencontainers.image.created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)" \
		"$ctr"
	previous="$(buildah inspect --type image --format '{{.FromImageID}}' "$prefix/$bin:$tag" 2>/dev/null || true)"
	buildah commit --quiet --timestamp "$epoch" --identity-label=false --iidfile "$out/$bin.iid" \
		--rm "$ctr" "$prefix/$bin:$tag" >/dev/null
	ctr=""
	id="$(cat "$out/$bin.iid")"
	# The image this tag named before, now untagged: removed unless in use.
	if [[ -n "$previous" && "sha256:$previous" != "$id" && "$previous" != "$id" ]]; then
		buildah rmi "$previous" >/dev/null 2>&1 || true
	fi
	size="$(podman image inspect --format '{{.Size}}' "$prefix/$bin:$tag" 2>/dev/null || echo unknown)"
	echo "$prefix/$bin:$tag $id $size"
done
