#!/usr/bin/env bash
# bench-scale.sh is `task bench:scale` without arguments: every measurement
# of docs/performance.md's fleet-size table, one after the other, each
# printing its figures and a "goal" line per goal, then the goal lines
# again as a summary. A step that fails is reported and the next one runs;
# the script exits non-zero when any step failed (a figure that misses its
# goal is printed, never a failure).
#
#  1. fleet-scale -n 1000,10000 on the embedded server (3x floor; 10 s)
#  2. fleet-scale on a cluster of nats-server processes at the large size
#     (100,000 devices: converged within 60 s)
#  3. BenchmarkKubeRollout: 10,000 Devices in the real kube-apiserver
#  4. the auth callout: connect rate against plain tokens, reconnect storm
#  5. BenchmarkRebuild: projection rebuild against raw ordered replay
#  6. BenchmarkIdleHeartbeatStoredWrites: idle devices' stored writes on a
#     3-server R3 cluster, before and after ADR 0024
#  7. BenchmarkKubeColdStart: the operator's start and a leader failover to
#     a decided rollout over BENCH_SCALE_KUBE_DEVICES Devices
#
# Environment: FLEET_SCALE (the fleet-scale binary, required),
# BENCH_SCALE_LARGE (default 100000), BENCH_SCALE_SERVERS (default 7),
# BENCH_SCALE_LARGE_RATE (connects per second of the large ramp, default
# 200), BENCH_SCALE_DISTINCT_KEYS (fleet-scale's -distinct-keys for the large
# size, default 0: one key per device), BENCH_SCALE_KUBE_DEVICES (default
# 10000), BENCH_SCALE_STEPS (the
# steps to run, default "1 2 3 4 5 6 7"). The whole output is also written to
# .cache/bench/scale-<time>.log.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
scale="${FLEET_SCALE:?FLEET_SCALE must name the fleet-scale binary (task bench:scale builds it)}"
large="${BENCH_SCALE_LARGE:-100000}"
servers="${BENCH_SCALE_SERVERS:-7}"
rate="${BENCH_SCALE_LARGE_RATE:-200}"
distinct="${BENCH_SCALE_DISTINCT_KEYS:-0}"
kube="${BENCH_SCALE_KUBE_DEVICES:-10000}"
steps="${BENCH_SCALE_STEPS:-1 2 3 4 5 6 7}"
tags="remote exclude_graphdriver_btrfs containers_image_openpgp"

mkdir -p "$root/.cache/bench"
log="$root/.cache/bench/scale-$(date -u +%Y%m%dT%H%M%SZ).log"
failed=()

# step NAME COMMAND...: runs one step, its output to the terminal and the log.
step() {
	local name="$1"
	shift
	printf '\n=== %s: %s\n' "$name" "$*" | tee -a "$log"
	if ! (cd "$root" && "$@") 2>&1 | tee -a "$log"; then
		failed+=("$name")
		printf '=== %s FAILED\n' "$name" | tee -a "$log"
	fi
}

for s in $steps; do
	case "$s" in
	1) step "1,000 and 10,000 devices, embedded server" "$scale" -n 1000,10000 ;;
	2) step "$large devices, $servers nats-server processes" "$scale" -n "$large" -servers "$servers" -per-process 8000 -rate "$rate" -distinct-keys "$distinct" ;;
	3) step "$kube Devices in kube-apiserver" env FLEET_KUBE_DEVICES="$kube" go test -tags "$tags" -run '^$' -bench KubeRollout -benchtime 1x -timeout 60m ./operator/ ;;
	4) step "auth callout" go test -tags "$tags" -run '^$' -bench 'Connect$|ReconnectStorm' -benchtime 1x -timeout 30m ./authcallout/ ;;
	5) step "projection rebuild" go test -tags "$tags" -run '^$' -bench Rebuild -timeout 30m ./projections/ ;;
	6) step "idle heartbeats on 3 servers" go test -tags "$tags" -run '^$' -bench IdleHeartbeatStoredWrites -benchtime 1x -timeout 15m ./events/ ;;
	7) step "$kube Devices: operator cold start" env FLEET_KUBE_DEVICES="$kube" go test -tags "$tags" -run '^$' -bench KubeColdStart -benchtime 1x -timeout 60m ./operator/ ;;
	*)
		echo "bench-scale.sh: unknown step $s in BENCH_SCALE_STEPS: use 1 to 7" >&2
		exit 2
		;;
	esac
done

printf '\n=== goals (from %s)\n' "${log#"$root"/}"
grep -E '(^|[[:space:]])goal[[:space:]]' "$log" | sed -E 's/^[[:space:]]+//'
if ((${#failed[@]} > 0)); then
	printf 'failed steps: %s\n' "${failed[*]}"
	exit 1
fi
