# shellcheck shell=bash
# lib.sh: helpers shared by the setup and stop scripts. Source it; do not run it.
#
# Defines ROOT (the repository root), RUN (the run folder .cache/run/ that
# holds PID files, logs, the Podman socket and the registry's files), SUDO
# (empty when running as root, "sudo" otherwise) and a few small functions.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# RUN has every link resolved: .cache is often a link to a cache several
# checkouts share, and the services started here (the registry, the Podman
# service) keep using the files their configuration names. Named through
# this checkout's link they would break for every checkout once this one is
# deleted.
#
# real_path PATH: PATH with every link resolved (in bash alone: the tests run
# the scripts with a PATH of fakes); its part that does not exist yet is
# kept as is.
real_path() {
	local dir="$1" rest=""
	while [[ -n "$dir" && ! -d "$dir" ]]; do
		rest="/${dir##*/}$rest"
		dir="${dir%/*}"
	done
	printf '%s%s\n' "$(CDPATH='' cd -P "${dir:-/}" && pwd)" "$rest"
}
RUN="$(real_path "$ROOT/.cache/run")"

# Every unexpected failure names the script, the line and the command (set
# -e alone ends a script silently). Functions and subshells inherit it (-E).
set -E
trap 'rc=$?; printf "%s: line %s: \"%s\" failed (exit %s); the messages above say why; fix it and re-run\n" "${0##*/}" "$LINENO" "$BASH_COMMAND" "$rc" >&2' ERR

SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
	SUDO="sudo"
fi

# now_ms prints a monotonic-enough wall clock in milliseconds.
now_ms() { date +%s%3N; }

# pid_alive PIDFILE NAME: the PID in PIDFILE is running and its command line
# contains NAME (guards against a recycled PID).
pid_alive() {
	local pidfile="$1" name="$2" pid
	[[ -s "$pidfile" ]] || return 1
	pid="$(cat "$pidfile")"
	[[ "$pid" =~ ^[0-9]+$ ]] || return 1
	[[ -r "/proc/$pid/cmdline" ]] || return 1
	tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$name"
}

# stop_pidfile PIDFILE NAME TIMEOUT_S: stop the process named in PIDFILE
# (TERM, then KILL after TIMEOUT_S seconds) and remove the PID file.
stop_pidfile() {
	local pidfile="$1" name="$2" timeout="$3" pid deadline
	if ! pid_alive "$pidfile" "$name"; then
		$SUDO rm -f "$pidfile"
		return 0
	fi
	pid="$(cat "$pidfile")"
	$SUDO kill -TERM "$pid" 2>/dev/null || true
	deadline=$(( $(date +%s) + timeout ))
	while [[ -d "/proc/$pid" ]] && (( $(date +%s) < deadline )); do
		sleep 0.1
	done
	if [[ -d "/proc/$pid" ]]; then
		$SUDO kill -KILL "$pid" 2>/dev/null || true
	fi
	$SUDO rm -f "$pidfile"
}

# pid_last_arg PIDFILE: prints the last argument of the command line of the
# process named in PIDFILE (the configuration file a service was started
# with).
pid_last_arg() {
	local pid
	pid="$(cat "$1")"
	tr '\0' '\n' < "/proc/$pid/cmdline" | tail -n 1
}

# config_files_missing CONFIG: prints the registry configuration CONFIG when
# it is gone, else the first file it names that is gone (the htpasswd file,
# the TLS certificate and key; not the storage root, made on the first
# push), and succeeds; fails, printing nothing, when every one is there. A
# registry whose htpasswd is gone answers 400 to every request.
config_files_missing() {
	local cfg="$1" f
	if [[ ! -f "$cfg" ]]; then
		printf '%s\n' "$cfg"
		return 0
	fi
	while read -r f; do
		if [[ -n "$f" && ! -e "$f" ]]; then
			printf '%s\n' "$f"
			return 0
		fi
	done < <(sed -n -E 's/^[[:space:]]*(path|certificate|key):[[:space:]]*//p' "$cfg")
	return 1
}

# wait_for TIMEOUT_S DESCRIPTION COMMAND...: run COMMAND until it succeeds or
# the deadline passes.
wait_for() {
	local timeout="$1" what="$2" deadline
	shift 2
	deadline=$(( $(date +%s) + timeout ))
	until "$@" >/dev/null 2>&1; do
		if (( $(date +%s) >= deadline )); then
			echo "timed out after ${timeout}s waiting for $what" >&2
			return 1
		fi
		sleep 0.1
	done
}

# ------------------------------------------------------------ Debian packages
#
# Package detection and installation shared by the setup scripts. Every
# function here is safe under `set -euo pipefail` whatever dpkg knows: a
# package dpkg has never heard of is a missing package, not a failure.

# APT_LOCK_TIMEOUT is how long (seconds) apt waits for the dpkg and lists
# locks another apt holds (a fresh VM often runs apt at boot).
APT_LOCK_TIMEOUT="${APT_LOCK_TIMEOUT:-600}"

# package_installed PKG: PKG is installed (dpkg status "installed", whatever
# the selection: install, hold or deinstall). Removed packages that left
# their configuration files (config-files), half-installed, unpacked,
# half-configured and never-seen packages are not installed.
package_installed() {
	local status
	# dpkg-query exits 1 for a package it has never heard of; that is an
	# answer ("not installed"), not an error.
	status="$(dpkg-query -W -f='${db:Status-Status}\n' "$1" 2>/dev/null)" || status=""
	# One line per architecture instance; any installed instance counts.
	[[ $'\n'"$status"$'\n' == *$'\n'installed$'\n'* ]]
}

# missing_packages PKG...: prints each PKG that is not installed, one per line.
missing_packages() {
	local p
	for p in "$@"; do
		package_installed "$p" || printf '%s\n' "$p"
	done
}

# APT_LOG is where apt's output goes; its tail is printed when apt fails.
# POLICY_RC_D (default /usr/sbin/policy-rc.d) is the policy install_packages
# writes while it installs; tests point both elsewhere.
APT_LOG="${APT_LOG:-$RUN/apt.log}"

# apt_get ARGS...: apt-get non-interactively, keeping existing configuration
# files, waiting up to APT_LOCK_TIMEOUT for another apt to finish, retrying a
# failed download once, and repairing a dpkg that an earlier run interrupted.
# Output goes to APT_LOG; on failure apt's own last lines are printed to
# stderr.
apt_get() {
	local rc deadline
	mkdir -p "$(dirname "$APT_LOG")"
	deadline=$(( $(date +%s) + APT_LOCK_TIMEOUT ))
	while :; do
		printf '\n$ apt-get %s\n' "$*" >> "$APT_LOG"
		rc=0
		$SUDO env DEBIAN_FRONTEND=noninteractive apt-get -q \
			-o DPkg::Lock::Timeout="$APT_LOCK_TIMEOUT" \
			-o Acquire::Retries=1 \
			-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
			"$@" >> "$APT_LOG" 2>&1 || rc=$?
		(( rc == 0 )) && return 0
		local tail
		tail="$(tail -n 40 "$APT_LOG")"
		if [[ "$tail" == *"Could not get lock"* || "$tail" == *"Unable to acquire the dpkg frontend lock"* ]] \
			&& (( $(date +%s) < deadline )); then
			# The lists lock of `apt-get update` is not covered by
			# DPkg::Lock::Timeout on every apt version: wait here too.
			sleep 2
			continue
		fi
		if [[ "$tail" == *"dpkg was interrupted"* ]]; then
			echo "setup: dpkg was interrupted earlier; running dpkg --configure -a" >&2
			$SUDO env DEBIAN_FRONTEND=noninteractive dpkg --configure -a >> "$APT_LOG" 2>&1 || true
			if (( $(date +%s) < deadline )); then
				deadline=0 # repair once
				continue
			fi
		fi
		{
			echo "setup: apt-get $* failed (exit $rc); apt said:"
			tail -n 25 "$APT_LOG" | sed 's/^/  | /'
			echo "  (whole output: ${APT_LOG#"$ROOT"/})"
		} >&2
		return "$rc"
	done
}

# install_packages PKG...: installs the PKGs that are missing (without
# recommended packages), keeping package maintainer scripts from starting
# services. Returns non-zero, after printing apt's error and what to do, when
# they cannot be installed.
install_packages() {
	local missing
	mapfile -t missing < <(missing_packages "$@")
	if (( ${#missing[@]} == 0 )); then
		return 0
	fi
	printf 'setup: installing %s\n' "${missing[*]}"
	if ! command -v apt-get >/dev/null 2>&1; then
		echo "setup: apt-get not found: install ${missing[*]} with this system's package manager (the scripts support Debian 12)" >&2
		return 1
	fi
	# A policy-rc.d that refuses every service start (the Debian
	# docker-registry service would take port 5000 on every interface).
	local policy="${POLICY_RC_D:-/usr/sbin/policy-rc.d}" made_policy="" rc=0
	if [[ ! -e "$policy" ]]; then
		printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
		$SUDO chmod 0755 "$policy"
		made_policy=1
		# shellcheck disable=SC2064 # expand now: the locals are gone at exit
		trap "$SUDO rm -f '$policy'" EXIT
	fi
	# A failed update is not final: the lists already there may do.
	apt_get update || echo "setup: apt-get update failed; trying the install with the package lists already on this machine" >&2
	if ! apt_get install -y --no-install-recommends "${missing[@]}"; then
		echo "setup: retrying the install once after a fresh apt-get update" >&2
		apt_get update || true
		apt_get install -y --no-install-recommends "${missing[@]}" || rc=$?
	fi
	if [[ -n "$made_policy" ]]; then
		$SUDO rm -f "$policy"
		trap - EXIT
	fi
	if (( rc != 0 )); then
		echo "setup: could not install ${missing[*]}: read apt's error above; check the machine reaches its Debian mirror (/etc/apt/sources.list.d/), then re-run" >&2
		return "$rc"
	fi
	local still
	mapfile -t still < <(missing_packages "${missing[@]}")
	if (( ${#still[@]} )); then
		echo "setup: apt-get install succeeded but dpkg still lists as not installed: ${still[*]} (see ${APT_LOG#"$ROOT"/})" >&2
		return 1
	fi
}

# ------------------------------------------------------------------- ports

# port_held PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_held() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# port_holder PORT: prints which process listens on PORT, as well as this
# machine can tell ("unknown process" without ss).
port_holder() {
	local who=""
	if command -v ss >/dev/null 2>&1; then
		who="$($SUDO ss -Htlnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\(.*\)))$/\1/p' | head -n 1)"
	fi
	printf '%s\n' "${who:-unknown process}"
}

# free_port FROM TO: prints the first port in FROM..TO nothing listens on.
free_port() {
	local p
	for (( p = $1; p <= $2; p++ )); do
		if ! port_held "$p"; then
			printf '%s\n' "$p"
			return 0
		fi
	done
	return 1
}
