#!/usr/bin/env bash
# stop.sh stops the services scripts/setup-podman.sh started (the Podman API
# service and the test registry), using the PID files in .cache/run/. Safe to
# run when nothing is running. Images, registry data, credentials and the
# built binaries stay; the next setup run starts the services again.
#
# kube-apiserver and etcd are not services: each test package starts and
# stops its own (internal/testenv/kubeapi); this script only kills those left
# behind by a test process that died.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

for svc in "podman:system service:20" "registry:docker-registry:10"; do
	IFS=: read -r name match timeout <<<"$svc"
	if pid_alive "$RUN/$name.pid" "$match"; then
		stop_pidfile "$RUN/$name.pid" "$match" "$timeout"
		echo "stop: stopped $name"
	else
		rm -f "$RUN/$name.pid"
		echo "stop: $name was not running"
	fi
done
rm -f "$RUN/podman.sock"

# etcd and kube-apiserver left behind by test processes that died without
# stopping them (internal/testenv/kubeapi records them in .cache/run/kubeapi/).
shopt -s nullglob
for rec in "$RUN"/kubeapi/*-*; do
	owner="$(basename "$rec")"; owner="${owner%%-*}"
	if [[ -d "/proc/$owner" ]]; then
		continue # its test process still runs and will stop them
	fi
	while read -r pid; do
		[[ "$pid" =~ ^[0-9]+$ ]] || continue
		comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
		if [[ "$comm" == etcd || "$comm" == kube-apiserver ]]; then
			kill -KILL "$pid" 2>/dev/null || true
			echo "stop: killed leftover $comm (pid $pid)"
		fi
	done < "$rec"
	rm -f "$rec"
done
