#!/usr/bin/env bash
# check-fresh-debian.sh runs the package step of scripts/setup-podman.sh and
# scripts/setup-browser.sh in a fresh Debian 12 root, where dpkg has never
# heard of Podman, Chromium or any package the tests need: the situation of a
# new machine, reproduced on this one.
#
# The root is made once with mmdebstrap (variant apt, from this machine's
# Debian mirror, about 20 s) and cached as .cache/fresh-debian/bookworm.tar;
# each run unpacks it into a new folder, binds /proc and /dev, copies
# resolv.conf and this checkout's scripts, runs
# `bash scripts/setup-podman.sh --packages-only` and
# `bash scripts/setup-browser.sh` inside with chroot, checks every package is
# then installed (and chromium starts), and removes the folder. It needs root
# (chroot, mount) and installs mmdebstrap on this machine when missing.
#
# Usage: scripts/check-fresh-debian.sh [--keep]
#   --keep  leave the unpacked root in .cache/fresh-debian/root for a look.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

log() { printf 'check-fresh-debian: %s\n' "$*"; }

if [[ "$(id -u)" -ne 0 ]]; then
	echo "check-fresh-debian: needs root (chroot and mount): run it with sudo" >&2
	exit 1
fi

DIR="$ROOT/.cache/fresh-debian"
TAR="$DIR/bookworm.tar"
mkdir -p "$DIR"

if [[ ! -s "$TAR" ]]; then
	install_packages mmdebstrap
	mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
	if [[ -z "$mirror" ]]; then
		echo "check-fresh-debian: no Debian mirror found in /etc/apt/sources.list.d/debian.sources" >&2
		exit 1
	fi
	log "making a Debian 12 root from $mirror (once; cached as ${TAR#"$ROOT"/})"
	mmdebstrap --variant=apt --mode=root --format=tar bookworm "$TAR.tmp" "$mirror"
	mv -f "$TAR.tmp" "$TAR"
fi

target="$DIR/root"
cleanup() {
	umount "$target/proc" 2>/dev/null || true
	umount "$target/dev" 2>/dev/null || true
	if [[ "${1:-}" != keep ]]; then
		rm -rf "$target"
	fi
}
rm -rf "$target"
mkdir -p "$target"
if [[ "${1:-}" == "--keep" ]]; then
	trap 'cleanup keep' EXIT
else
	trap cleanup EXIT
fi
tar -C "$target" -xf "$TAR"
mount --bind /proc "$target/proc"
mount --bind /dev "$target/dev"
cp /etc/resolv.conf "$target/etc/resolv.conf"
mkdir -p "$target/src/scripts"
cp "$ROOT"/scripts/*.sh "$target/src/scripts/"

log "dpkg in the fresh root knows podman: $(chroot "$target" dpkg-query -W podman >/dev/null 2>&1 && echo yes || echo no)"
log "running: bash scripts/setup-podman.sh --packages-only (in the fresh root)"
start=$(date +%s)
chroot "$target" bash -c 'cd /src && bash scripts/setup-podman.sh --packages-only'
log "the package step ended with exit 0 in $(( $(date +%s) - start )) s"

log "running: bash scripts/setup-browser.sh (in the fresh root)"
start=$(date +%s)
chroot "$target" bash -c 'cd /src && bash scripts/setup-browser.sh'
log "the browser step ended with exit 0 in $(( $(date +%s) - start )) s"

# The same lists the scripts install, checked from outside their own logic.
packages=""
for script in setup-podman.sh setup-browser.sh; do
	# From the PACKAGES=( line to the first line that closes it (the same
	# line for a one-line list).
	packages+="$(awk '/^PACKAGES=\(/ {f = 1} f {print} f && /\)/ {exit}' "$ROOT/scripts/$script" | tr -d '()\t' | sed 's/^PACKAGES=//' | tr '\n' ' ') "
done
# shellcheck disable=SC2086,SC2016 # a list of package names; a dpkg format
status="$(chroot "$target" dpkg-query -W -f='${Package} ${db:Status-Status}\n' $packages)"
printf '%s\n' "$status" | sed 's/^/  /'
if printf '%s\n' "$status" | grep -qv ' installed$'; then
	echo "check-fresh-debian: some packages are not installed in the fresh root (above)" >&2
	exit 1
fi
log "every package is installed in the fresh root"
