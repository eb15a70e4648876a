package dev

import "errors"

// ErrKubeBinariesMissing means kube-apiserver, etcd or kubectl is not in the
// binary folder: build them once with `go tool -modfile=tools/go.mod task
// setup:k8s` (or pass --kube-bin-dir).
var ErrKubeBinariesMissing = errors.New("fleet dev: kube-apiserver, etcd or kubectl is missing")

// ErrNoRepoRoot means the working directory is not inside the Fleet
// repository, so the default binary and CRD folders are unknown: run from the
// repository or pass --kube-bin-dir, --crd-dir and --admission-dir.
var ErrNoRepoRoot = errors.New("fleet dev: not inside the harmony-fleet repository")

// ErrDataDirInUse means another live fleet dev runs on the same data folder.
var ErrDataDirInUse = errors.New("fleet dev: the data folder is in use")

// ErrNATSPortTaken means another process listens on --nats-port: stop it,
// or start fleet dev with another --nats-port (-1: any free port).
var ErrNATSPortTaken = errors.New("fleet dev: the NATS port is taken")
