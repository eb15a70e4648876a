#!/usr/bin/env bash
# setup-k8s.sh builds the Kubernetes test binaries from the Go module proxy:
# kube-apiserver and kubectl from tools/k8s (k8s.io/kubernetes with every
# staging module replaced by its published version) and etcd from tools/etcd.
# They land in a versioned, git-ignored folder, .cache/k8s-<version>/ at the
# repository root, which internal/testenv/kubeapi uses.
#
# Idempotent: a binary that is already there (and reports the expected
# version) is not rebuilt, so a warm run takes well under a second. Builds run
# one at a time under `nice` because the kube-apiserver build alone takes
# about 12 minutes and 2.5 GB of memory on two cores.
#
# Usage: scripts/setup-k8s.sh [--print-dir]
#   --print-dir  print the binary folder and exit (builds nothing).
set -euo pipefail

K8S_VERSION=v1.37.2   # must match tools/k8s/go.mod
ETCD_VERSION=v3.7.3   # must match tools/etcd/go.mod

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/.cache/k8s-$K8S_VERSION"

if [[ "${1:-}" == "--print-dir" ]]; then
	echo "$OUT"
	exit 0
fi

k8s_major="${K8S_VERSION#v}"; k8s_major="${k8s_major%%.*}"
k8s_minor="${K8S_VERSION#v*.}"; k8s_minor="${k8s_minor%%.*}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$K8S_VERSION"
	ldflags+=" -X $pkg.gitMajor=$k8s_major"
	ldflags+=" -X $pkg.gitMinor=$k8s_minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done
etcd_ldflags="-X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"

log() { printf 'setup:k8s: %s\n' "$*"; }

# up_to_date NAME VERSION-ARGS... : the binary exists and its version output
# contains the expected version.
up_to_date() {
	local bin="$OUT/$1" want="$2"
	shift 2
	[[ -x "$bin" ]] || return 1
	"$bin" "$@" 2>/dev/null | grep -q -- "$want"
}

# build NAME MODULE-DIR PACKAGE LDFLAGS : build into a temporary file and
# rename it into place, so an interrupted build never leaves a broken binary.
build() {
	local name="$1" dir="$2" pkg="$3" flags="$4"
	local start end
	log "building $name from $pkg (cold builds take minutes; see docs/testing.md)"
	start=$(date +%s)
	mkdir -p "$OUT"
	# -trimpath is deliberately absent: it would stop the build cache being
	# shared with `go test` of packages that import the same code.
	if ! CGO_ENABLED=0 nice -n 10 go -C "$ROOT/$dir" build \
		-ldflags "$flags" -o "$OUT/.$name.tmp" "$pkg"; then
		rm -f "$OUT/.$name.tmp"
		{
			echo "setup:k8s: building $name ($pkg in $dir) failed; go's error is above."
			echo "  - 'go: downloading' errors or 'dial tcp': this machine must reach the Go module proxy ($(go env GOPROXY))."
			echo "  - 'signal: killed' or 'cannot allocate memory': the kube-apiserver build needs about 2.5 GB of free memory."
			echo "  - 'no space left on device': free space for the Go build cache ($(go env GOCACHE)) and .cache/."
			echo "  Then re-run: go tool -modfile=tools/go.mod task setup:k8s"
		} >&2
		exit 1
	fi
	mv -f "$OUT/.$name.tmp" "$OUT/$name"
	end=$(date +%s)
	log "built $name in $((end - start))s"
}

total_start=$(date +%s)

if ! command -v go >/dev/null 2>&1; then
	echo "setup:k8s: go is not on PATH; install Go 1.26 (https://go.dev/dl/) and re-run" >&2
	exit 1
fi

if up_to_date kube-apiserver "$K8S_VERSION" --version; then
	log "kube-apiserver $K8S_VERSION already built"
else
	build kube-apiserver tools/k8s k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
fi

if up_to_date kubectl "$K8S_VERSION" version --client; then
	log "kubectl $K8S_VERSION already built"
else
	build kubectl tools/k8s k8s.io/kubernetes/cmd/kubectl "$ldflags"
fi

if up_to_date etcd "${ETCD_VERSION#v}" --version; then
	log "etcd $ETCD_VERSION already built"
else
	build etcd tools/etcd go.etcd.io/etcd/server/v3 "$etcd_ldflags"
fi

log "binaries in .cache/k8s-$K8S_VERSION/ ($(( $(date +%s) - total_start ))s)"
