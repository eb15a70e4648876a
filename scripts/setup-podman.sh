#!/usr/bin/env bash
# setup-podman.sh installs and starts what the Podman tests need on a Debian
# 12 machine, without any pull from the internet:
#
#   1. the Debian packages (Podman 4.3, runc, netavark, buildah, skopeo,
#      busybox-static, the distribution registry, ...);
#   2. /etc/containers/containers.conf computed from this machine's limits
#      (ulimits at or below the hard limits, runc, cgroupfs, file events);
#   3. the base image localhost/fleet-base:latest, made from busybox-static
#      with `podman import` (into root's storage and, when a normal user
#      runs the script, into that user's rootless storage too: fleet dev and
#      buildah run as that user build FROM it); rootless Podman made usable
#      (/dev/net/tun 0666 as Debian has it, for slirp4netns; the user's
#      subordinate ids checked);
#   4. a TLS distribution registry with htpasswd (bcrypt) auth on
#      127.0.0.1:5000 (or the first free port above it when another process,
#      such as another checkout's registry, holds 5000; recorded in
#      registry.env), its self-signed CA trusted by Podman/buildah through
#      /etc/containers/certs.d/127.0.0.1:<port>/ca.crt;
#   5. the Podman API service on unix://.cache/run/podman.sock.
#
# Everything it starts keeps its PID file and log in the run folder
# .cache/run/ at the repository root; the registry's test credentials are in
# .cache/run/registry.env (mode 0600, git-ignored). scripts/stop.sh stops the
# services.
#
# Idempotent and safe to re-run: each step checks before it acts, so a warm
# run only verifies. Uses sudo for system changes only when not root.
#
# Usage: scripts/setup-podman.sh [--packages-only]
#   --packages-only  install the Debian packages, then stop (changes nothing
#                    else; scripts/check-fresh-debian.sh runs it in a fresh
#                    Debian 12 root).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BASE_IMAGE="localhost/fleet-base:latest"
REGISTRY_PORT=5000 # the first port tried; see "registry" below
REGISTRY_USER="fleet-test"
REG="$RUN/registry"
SOCK="$RUN/podman.sock"
CONF="/etc/containers/containers.conf"
CONF_MARK="# Managed by harmony-fleet scripts/setup-podman.sh"
PACKAGES=(podman runc conmon netavark aardvark-dns iptables catatonit uidmap
	fuse-overlayfs slirp4netns buildah skopeo busybox-static docker-registry
	apache2-utils openssl curl mmdebstrap)

log() { printf 'setup:podman: %s\n' "$*"; }

step_start=0
step() { step_start=$(now_ms); log "$1"; }
step_done() { log "  done in $(( $(now_ms) - step_start )) ms"; }

total_start=$(now_ms)

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
	msg="this script sets Podman up on Debian (apt-get) only"
	if [[ "${CI:-}" =~ ^(1|true|TRUE|True|t|T)$ ]]; then
		echo "setup:podman: $msg; CI=true: failing" >&2
		exit 1
	fi
	log "$msg; skipping: tests that need Podman will be skipped"
	exit 0
fi
mkdir -p "$RUN" "$REG"

# hash_of FILE...: a content hash used to notice that a running service was
# started with different inputs than the current ones.
hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -d' ' -f1; }

# write_if_changed DEST MODE [sudo]: write stdin to DEST only when it differs;
# returns 0 when the file was (re)written, 1 when it was already up to date.
write_if_changed() {
	local dest="$1" mode="$2" use_sudo="${3:-}" tmp
	tmp="$(mktemp)"
	cat > "$tmp"
	if [[ -f "$dest" ]] && cmp -s "$tmp" "$dest"; then
		rm -f "$tmp"
		return 1
	fi
	if [[ -n "$use_sudo" ]]; then
		$SUDO install -D -m "$mode" "$tmp" "$dest"
	else
		install -D -m "$mode" "$tmp" "$dest"
	fi
	rm -f "$tmp"
	return 0
}

# ---------------------------------------------------------------- packages
step "packages: ${#PACKAGES[@]} Debian packages"
mapfile -t missing < <(missing_packages "${PACKAGES[@]}")
if ((${#missing[@]})); then
	log "  missing: ${missing[*]}"
	if ! install_packages "${PACKAGES[@]}"; then
		echo "setup:podman: the Debian packages could not be installed (see above); nothing else was changed" >&2
		exit 1
	fi
else
	log "  all installed"
fi
step_done
if [[ "${1:-}" == "--packages-only" ]]; then
	log "packages only (--packages-only): done in $(( $(now_ms) - total_start )) ms"
	exit 0
fi

# -------------------------------------------------------- containers.conf
step "containers.conf: limits and runtime for this machine"
nofile="$(ulimit -Hn)"
if [[ "$nofile" == "unlimited" ]]; then nofile=1048576; fi
nproc="$(ulimit -Hu)"
if [[ "$nproc" == "unlimited" ]] || (( nproc > 32768 )); then nproc=32768; fi
if [[ -f "$CONF" ]] && ! grep -qF "$CONF_MARK" "$CONF" && [[ ! -f "$CONF.before-harmony-fleet" ]]; then
	$SUDO cp -p "$CONF" "$CONF.before-harmony-fleet"
	log "  kept the previous file as $CONF.before-harmony-fleet"
fi
if write_if_changed "$CONF" 0644 sudo <<EOF
$CONF_MARK
# from this machine's limits (ulimit -Hn, ulimit -Hu capped at 32768); the
# defaults exceed the hard limits of small VMs and every container would fail.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
# crun rejects the hybrid cgroup v1 layout of these VMs; there is no systemd.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
# Podman 4.3 would otherwise guess between CNI and netavark.
network_backend = "netavark"
EOF
then
	log "  wrote $CONF (nofile=$nofile, nproc=$nproc)"
else
	log "  up to date (nofile=$nofile, nproc=$nproc)"
fi
step_done

# ------------------------------------------------------------- base image
step "base image: $BASE_IMAGE from busybox-static"
base_tmp=""
# base_tar: the base image's root filesystem as a tar, made once.
base_tar() {
	if [[ -z "$base_tmp" ]]; then
		base_tmp="$(mktemp -d)"
		chmod 0755 "$base_tmp"
		local rootfs="$base_tmp/rootfs"
		mkdir -p "$rootfs"/{bin,etc,tmp,root,proc,sys,dev,var,home,run}
		chmod 1777 "$rootfs/tmp"
		cp /bin/busybox "$rootfs/bin/busybox"
		for app in $(/bin/busybox --list); do
			[[ "$app" == busybox ]] || ln -sf busybox "$rootfs/bin/$app"
		done
		printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$rootfs/etc/passwd"
		printf 'root:x:0:\nnobody:x:65534:\n' > "$rootfs/etc/group"
		tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$base_tmp/rootfs.tar" .
		chmod 0644 "$base_tmp/rootfs.tar"
	fi
	echo "$base_tmp/rootfs.tar"
}
# import_base [sudo]: import the base image into root's storage (sudo) or
# the invoking user's.
import_base() {
	local as="${1:-}"
	# $as is empty or "sudo" (word splitting intended).
	# shellcheck disable=SC2086
	$as podman import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["/bin/sh"]' \
		--message "harmony-fleet test base image from busybox-static" \
		"$(base_tar)" "$BASE_IMAGE" >/dev/null
}
if $SUDO podman image exists "$BASE_IMAGE"; then
	log "  present"
else
	import_base "$SUDO"
	log "  imported"
fi
if [[ -n "$SUDO" ]]; then
	# A normal user: fleet dev drives that user's rootless Podman
	# ($XDG_RUNTIME_DIR/podman/podman.sock) and harmony ship's buildah
	# runs as the user, so the user's own storage needs the image too.
	if podman image exists "$BASE_IMAGE"; then
		log "  present in $(id -un)'s rootless storage"
	else
		import_base ""
		log "  imported into $(id -un)'s rootless storage"
	fi
fi
[[ -z "$base_tmp" ]] || rm -rf "$base_tmp"
step_done

# -------------------------------------------------------- rootless Podman
step "rootless Podman: what a normal user's Podman needs"
# slirp4netns (rootless networking) opens /dev/net/tun as the user: Debian
# makes it 0666; some VMs and containers leave it 0600.
tun_mode="$(stat -c %a /dev/net/tun 2>/dev/null || true)"
if [[ -n "$tun_mode" && "$tun_mode" != 666 ]]; then
	$SUDO chmod 0666 /dev/net/tun
	log "  /dev/net/tun was mode $tun_mode: made 0666 (Debian's default)"
else
	log "  /dev/net/tun ${tun_mode:-absent}"
fi
if [[ -n "$SUDO" ]]; then
	me="$(id -un)"
	for f in /etc/subuid /etc/subgid; do
		if ! grep -q "^$me:" "$f" 2>/dev/null; then
			log "  $f has no range for $me (rootless Podman needs one): $SUDO usermod --add-subuids 100000-165535 --add-subgids 100000-165535 $me"
		fi
	done
fi
step_done

# --------------------------------------------------------------- registry
creds="$RUN/registry.env"
# The port: the one this checkout used before (registry.env), else 5000. A
# port another process holds (another checkout's registry, a Debian
# docker-registry service) is never shared: this checkout moves to the first
# free port from 5000 up and records it, so tests find it in registry.env.
# (No registry.env yet is an answer, not an error: `|| true` under set -e.)
port="$(sed -n 's/^FLEET_TEST_REGISTRY=127\.0\.0\.1://p' "$creds" 2>/dev/null || true)"
[[ "$port" =~ ^[0-9]+$ ]] || port="$REGISTRY_PORT"
if ! pid_alive "$RUN/registry.pid" docker-registry && port_held "$port"; then
	log "  port $port is held by another process ($(port_holder "$port")): this checkout's registry moves to a free port"
	if ! port="$(free_port "$REGISTRY_PORT" 5999)"; then
		echo "setup:podman: no free port from $REGISTRY_PORT to 5999 for the test registry; stop what holds them and re-run" >&2
		exit 1
	fi
fi
REGISTRY_ADDR="127.0.0.1:$port"
step "registry: TLS + htpasswd on $REGISTRY_ADDR"
if [[ ! -s "$creds" ]]; then
	( umask 077
	  printf 'FLEET_TEST_REGISTRY=%s\nFLEET_TEST_REGISTRY_USER=%s\nFLEET_TEST_REGISTRY_PASSWORD=%s\n' \
		"$REGISTRY_ADDR" "$REGISTRY_USER" "$(openssl rand -hex 16)" > "$creds" )
	log "  generated test credentials in .cache/run/registry.env"
elif ! grep -qxF "FLEET_TEST_REGISTRY=$REGISTRY_ADDR" "$creds"; then
	sed -i "s/^FLEET_TEST_REGISTRY=.*/FLEET_TEST_REGISTRY=$REGISTRY_ADDR/" "$creds"
	log "  recorded $REGISTRY_ADDR in .cache/run/registry.env"
fi
password="$(sed -n 's/^FLEET_TEST_REGISTRY_PASSWORD=//p' "$creds")"

# A small CA and a serving certificate for 127.0.0.1 and localhost, renewed
# when missing or within 30 days of expiry.
if ! openssl x509 -checkend 2592000 -noout -in "$REG/server.crt" >/dev/null 2>&1 \
	|| ! openssl x509 -checkend 2592000 -noout -in "$REG/ca.crt" >/dev/null 2>&1; then
	openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=harmony-fleet test registry CA" \
		-keyout "$REG/ca.key" -out "$REG/ca.crt" >/dev/null 2>&1
	openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
		-keyout "$REG/server.key" -out "$REG/server.csr" >/dev/null 2>&1
	printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$REG/server.ext"
	openssl x509 -req -in "$REG/server.csr" -CA "$REG/ca.crt" -CAkey "$REG/ca.key" \
		-CAcreateserial -days 3650 -extfile "$REG/server.ext" -out "$REG/server.crt" >/dev/null 2>&1
	chmod 0600 "$REG/ca.key" "$REG/server.key"
	log "  made a CA and a serving certificate"
fi
if write_if_changed "/etc/containers/certs.d/$REGISTRY_ADDR/ca.crt" 0644 sudo < "$REG/ca.crt"; then
	log "  trusted the CA in /etc/containers/certs.d/$REGISTRY_ADDR/ca.crt"
fi

# htpasswd with bcrypt; the password goes through stdin, never argv.
if ! printf '%s' "$password" | htpasswd -iv "$REG/htpasswd" "$REGISTRY_USER" >/dev/null 2>&1; then
	rm -f "$REG/htpasswd"
	printf '%s' "$password" | htpasswd -ciB "$REG/htpasswd" "$REGISTRY_USER" >/dev/null 2>&1
	chmod 0600 "$REG/htpasswd"
	log "  wrote htpasswd (bcrypt)"
fi

write_if_changed "$REG/config.yml" 0644 <<EOF || true
# Written by scripts/setup-podman.sh: the harmony-fleet test registry.
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $REG/data
  delete:
    enabled: true
http:
  addr: $REGISTRY_ADDR
  tls:
    certificate: $REG/server.crt
    key: $REG/server.key
auth:
  htpasswd:
    realm: harmony-fleet-test
    path: $REG/htpasswd
EOF

reg_hash="$(hash_of "$REG/config.yml" "$REG/htpasswd" "$REG/server.crt")"
if pid_alive "$RUN/registry.pid" docker-registry && [[ "$(cat "$RUN/registry.hash" 2>/dev/null)" != "$reg_hash" ]]; then
	log "  configuration changed: restarting"
	stop_pidfile "$RUN/registry.pid" docker-registry 10
fi
# A registry started with another checkout's path to the shared cache (before
# RUN was resolved, see lib.sh) breaks when that checkout is deleted: its
# configuration, or the htpasswd file it reads on every request, is gone.
if pid_alive "$RUN/registry.pid" docker-registry \
	&& gone="$(config_files_missing "$(pid_last_arg "$RUN/registry.pid")")"; then
	log "  its configuration names a file that is gone ($gone): restarting"
	stop_pidfile "$RUN/registry.pid" docker-registry 10
fi
registry_up() { curl -s -o /dev/null -w '%{http_code}' --cacert "$REG/ca.crt" "https://$REGISTRY_ADDR/v2/" | grep -q 401; }
if pid_alive "$RUN/registry.pid" docker-registry; then
	log "  running (pid $(cat "$RUN/registry.pid"))"
else
	if port_held "$port"; then
		echo "setup:podman: port $port is held by another process ($(port_holder "$port")); stop it or remove .cache/run/registry.env to pick another port, then re-run" >&2
		exit 1
	fi
	nohup docker-registry serve "$REG/config.yml" >> "$RUN/registry.log" 2>&1 < /dev/null &
	echo $! > "$RUN/registry.pid"
	echo "$reg_hash" > "$RUN/registry.hash"
	log "  started (pid $!, log .cache/run/registry.log)"
fi
wait_for 30 "the registry on $REGISTRY_ADDR" registry_up
step_done

# ---------------------------------------------------------- Podman service
step "podman service: unix://.cache/run/podman.sock"
conf_hash="$(hash_of "$CONF")"
if pid_alive "$RUN/podman.pid" "system service" && [[ "$(cat "$RUN/podman.hash" 2>/dev/null)" != "$conf_hash" ]]; then
	log "  containers.conf changed since the service started: restarting"
	stop_pidfile "$RUN/podman.pid" "system service" 20
fi
podman_up() { curl -fsS --unix-socket "$SOCK" http://d/_ping | grep -q OK; }
if pid_alive "$RUN/podman.pid" "system service"; then
	log "  running (pid $(cat "$RUN/podman.pid"))"
else
	rm -f "$SOCK"
	# The shell writes its own PID, then becomes the service (exec), so the PID
	# file names the service even when sudo sits in between.
	# $SUDO is empty or "sudo" (word splitting intended); $$, $1 and $2
	# belong to the inner shell.
	# shellcheck disable=SC2086,SC2016
	nohup $SUDO sh -c 'echo $$ > "$1"; exec podman system service --time=0 "unix://$2"' \
		sh "$RUN/podman.pid" "$SOCK" >> "$RUN/podman.log" 2>&1 < /dev/null &
	echo "$conf_hash" > "$RUN/podman.hash"
	wait_for 10 "the Podman service PID file" test -s "$RUN/podman.pid"
	log "  started (pid $(cat "$RUN/podman.pid"), log .cache/run/podman.log)"
fi
wait_for 30 "the Podman API on $SOCK" podman_up
if [[ -n "$SUDO" ]]; then
	# Rootful service, tests run as the invoking user.
	$SUDO chown "$(id -u):$(id -g)" "$SOCK"
fi
step_done

log "ready in $(( $(now_ms) - total_start )) ms: socket .cache/run/podman.sock, registry $REGISTRY_ADDR, credentials .cache/run/registry.env"
