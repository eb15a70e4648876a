package debianroot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// Package is a test package dpkg-deb builds: it installs
// /usr/share/<Name>/version holding Version, and runs Postinst (shell,
// optional) after set -e when configured.
type Package struct {
	Name, Version, Postinst string
}

// NewRepo returns an empty folder others may read (a container's users
// read it through a bind mount), removed when the test ends.
func NewRepo(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// WriteRepo builds pkgs with dpkg-deb into dir and writes the Packages
// index of a flat repository (deb [trusted=yes] file:<dir> ./) listing
// exactly them.
func WriteRepo(tb testing.TB, dir string, pkgs ...Package) {
	tb.Helper()
	dpkgDeb, err := exec.LookPath("dpkg-deb")
	if err != nil {
		tb.Fatalf("dpkg-deb is needed to build the test packages: apt-get install -y dpkg (%v)", err)
	}
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	var index bytes.Buffer
	for _, p := range pkgs {
		root := tb.TempDir()
		must(os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755))
		must(os.MkdirAll(filepath.Join(root, "usr/share", p.Name), 0o755))
		must(os.WriteFile(filepath.Join(root, "usr/share", p.Name, "version"), []byte(p.Version+"\n"), 0o644))
		control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: Harmony Fleet tests <tests@example.invalid>\nDescription: test package of the root updater\n", p.Name, p.Version)
		must(os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte(control), 0o644))
		if p.Postinst != "" {
			must(os.WriteFile(filepath.Join(root, "DEBIAN/postinst"), []byte("#!/bin/sh\nset -e\n"+p.Postinst), 0o755))
		}
		file := fmt.Sprintf("%s_%s_all.deb", p.Name, p.Version)
		if out, err := exec.Command(dpkgDeb, "--root-owner-group", "-b", root, filepath.Join(dir, file)).CombinedOutput(); err != nil {
			tb.Fatalf("dpkg-deb -b %s: %v\n%s", file, err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		must(err)
		sum := sha256.Sum256(b)
		fmt.Fprintf(&index, "%sFilename: ./%s\nSize: %d\nSHA256: %s\n\n", control, file, len(b), hex.EncodeToString(sum[:]))
	}
	must(os.WriteFile(filepath.Join(dir, "Packages"), index.Bytes(), 0o644))
}

// BuildBinary builds a static binary (CGO_ENABLED=0, the project's tags)
// of pkg, a folder of the module such as "cmd/fleet-agent", with
// main.version stamped, into a folder of its own others may read, and
// returns its path.
func BuildBinary(tb testing.TB, pkg, version string) string {
	tb.Helper()
	root, err := podmantest.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	dir := NewRepo(tb)
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp",
		"-ldflags", "-X main.version="+version, "-o", bin, "./"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}
