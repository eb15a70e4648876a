// Package buildah builds and pushes images with the buildah command, the
// way harmony ship needs it: reproducible builds (fixed timestamps, so an
// unchanged commit gives unchanged digests), pushes that record the digest
// the registry returned (--digestfile), and registry credentials that live
// only in a temporary auth file (AuthDir) removed afterwards.
//
// Invariants: credentials never reach a command line, an error, buildah's
// environment (only the variables buildah needs are passed: never the CI
// secret) or the user's container configuration (no podman login, no
// ~/.config/containers/auth.json, no DOCKER_CONFIG). Only package harmony
// imports it.
package buildah

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// ErrBuild means buildah failed to build an image.
var ErrBuild = errors.New("buildah: build failed")

// ErrPush means buildah failed to push an image.
var ErrPush = errors.New("buildah: push failed")

// ErrNoBuildah means the buildah command is not installed.
var ErrNoBuildah = errors.New("buildah: the buildah command is not installed (apt-get install buildah)")

// AuthDir is a temporary registry configuration directory holding one
// auth.json for one registry. Close removes it.
type AuthDir struct {
	dir  string
	file string
}

// NewAuthDir creates a private temporary directory (mode 0700) under the
// system temporary folder with auth.json (mode 0600) holding username and
// password for registry.
func NewAuthDir(registry, username, password string) (*AuthDir, error) {
	dir, err := os.MkdirTemp("", "harmony-registry-")
	if err != nil {
		return nil, fmt.Errorf("buildah: temporary registry configuration: %w", err)
	}
	a := &AuthDir{dir: dir, file: filepath.Join(dir, "auth.json")}
	data, err := json.Marshal(map[string]any{"auths": map[string]any{
		registry: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(username + ":" + password))},
	}})
	if err != nil {
		a.Close()
		return nil, fmt.Errorf("buildah: encode registry configuration: %w", err)
	}
	if err := os.WriteFile(a.file, data, 0o600); err != nil {
		a.Close()
		return nil, fmt.Errorf("buildah: write registry configuration: %w", err)
	}
	return a, nil
}

// File is the auth file's path (for --authfile and REGISTRY_AUTH_FILE).
func (a *AuthDir) File() string { return a.file }

// Dir is the temporary directory; it also holds digest files.
func (a *AuthDir) Dir() string { return a.dir }

// Close removes the directory and everything in it. Calling it again is
// harmless.
func (a *AuthDir) Close() error {
	if a == nil || a.dir == "" {
		return nil
	}
	err := os.RemoveAll(a.dir)
	a.dir = ""
	if err != nil {
		return fmt.Errorf("buildah: remove temporary registry configuration: %w", err)
	}
	return nil
}

// Tool runs buildah.
type Tool struct {
	// Path of the buildah binary. Default: found on PATH.
	Path string
	// Auth, when set, is the only registry configuration buildah uses (for
	// base images in build and for push).
	Auth *AuthDir
	// Timestamp is the created time (seconds since the epoch) of every
	// image and of the files in its layers, so that the same sources give
	// the same digest.
	Timestamp int64
}

// Build builds dockerfile with context dir contextDir and tags the result
// ref (a fully qualified name with tag).
func (t Tool) Build(ctx context.Context, ref, dockerfile, contextDir string) error {
	args := []string{"bud", "--quiet", "--pull=false", "--timestamp", strconv.FormatInt(t.Timestamp, 10),
		"--tag", ref, "--file", dockerfile}
	if t.Auth != nil {
		args = append(args, "--authfile", t.Auth.File())
	}
	args = append(args, contextDir)
	if out, err := t.run(ctx, args...); err != nil {
		return fmt.Errorf("%w: %s (Dockerfile %s, context %s): %w\n%s", ErrBuild, ref, dockerfile, contextDir, err, tail(out))
	}
	return nil
}

var digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// Push pushes ref to its registry and returns the manifest digest the
// registry returned ("sha256:…").
func (t Tool) Push(ctx context.Context, ref string) (string, error) {
	if t.Auth == nil {
		return "", fmt.Errorf("%w: %s: no registry configuration", ErrPush, ref)
	}
	f, err := os.CreateTemp(t.Auth.Dir(), "digest-")
	if err != nil {
		return "", fmt.Errorf("%w: %s: digest file: %w", ErrPush, ref, err)
	}
	digestFile := f.Name()
	f.Close()
	defer os.Remove(digestFile)
	if out, err := t.run(ctx, "push", "--quiet", "--authfile", t.Auth.File(), "--digestfile", digestFile, ref, "docker://"+ref); err != nil {
		return "", fmt.Errorf("%w: %s: %w\n%s", ErrPush, ref, err, tail(out))
	}
	b, err := os.ReadFile(digestFile)
	if err != nil {
		return "", fmt.Errorf("%w: %s: read digest file: %w", ErrPush, ref, err)
	}
	d := strings.TrimSpace(string(b))
	if !digestRE.MatchString(d) {
		return "", fmt.Errorf("%w: %s: buildah reported digest %q, want sha256:<64 hex>", ErrPush, ref, d)
	}
	return d, nil
}

func (t Tool) run(ctx context.Context, args ...string) ([]byte, error) {
	path := t.Path
	if path == "" {
		p, err := exec.LookPath("buildah")
		if err != nil {
			return nil, ErrNoBuildah
		}
		path = p
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = env(t.Auth)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// env is what buildah needs of the process environment (passEnv,
// passPrefixes) plus REGISTRY_AUTH_FILE naming the temporary auth file.
// Everything else stays out of buildah and the processes it starts: the CI
// secret HARMONY_ZITADEL_KEY_JSON, the user's registry configuration
// (REGISTRY_AUTH_FILE, DOCKER_CONFIG), tokens and kubeconfigs.
// SOURCE_DATE_EPOCH stays out too: harmony passes it as --timestamp.
func env(a *AuthDir) []string {
	var e []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if passEnv[k] || slices.ContainsFunc(passPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			e = append(e, kv)
		}
	}
	if a != nil {
		e = append(e, "REGISTRY_AUTH_FILE="+a.File())
	}
	return e
}

// passEnv are the variables buildah reads: where its programs, home,
// temporary files, rootless runtime directory and configuration are, the
// locale, and the proxy and TLS trust of its registry connections.
var passEnv = map[string]bool{
	"PATH": true, "HOME": true, "TMPDIR": true, "USER": true, "LOGNAME": true, "LANG": true, "TZ": true,
	"XDG_RUNTIME_DIR": true, "XDG_CONFIG_HOME": true, "XDG_DATA_HOME": true, "DBUS_SESSION_BUS_ADDRESS": true,
	"STORAGE_DRIVER": true, "STORAGE_OPTS": true,
	"HTTP_PROXY": true, "HTTPS_PROXY": true, "NO_PROXY": true, "http_proxy": true, "https_proxy": true, "no_proxy": true,
	"SSL_CERT_FILE": true, "SSL_CERT_DIR": true,
}

// passPrefixes are the variable families buildah and containers/* read
// (CONTAINERS_CONF, CONTAINERS_STORAGE_CONF, BUILDAH_ISOLATION, …, and the
// _CONTAINERS_* / _BUILDAH_* markers of a rootless re-exec) and the locale.
var passPrefixes = []string{"CONTAINERS_", "_CONTAINERS_", "BUILDAH_", "_BUILDAH_", "LC_"}

// tail keeps the last lines of buildah's output for an error message.
func tail(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}

// Remove removes the local image ref (harmony's build once pushed), so CI
// runners do not accumulate images.
func (t Tool) Remove(ctx context.Context, ref string) error {
	if out, err := t.run(ctx, "rmi", ref); err != nil {
		return fmt.Errorf("buildah: rmi %s: %w\n%s", ref, err, tail(out))
	}
	return nil
}
