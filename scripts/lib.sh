# lib.sh: helpers shared by the setup and stop scripts. Source it; do not run it.
#
# Defines ROOT (the repository root), RUN (the run folder .cache/run/ that
# holds PID files, logs, the Podman socket and the registry's files), SUDO
# (empty when running as root, "sudo" otherwise) and a few small functions.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN="$ROOT/.cache/run"

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
