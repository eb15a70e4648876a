package main

// Volume host paths: where the agent may create the folder a score's
// volumes[].host_path names (docs/agent.md, "Host paths").
//
// Podman (rootless, as the agent's user) does the bind mount itself; the
// agent only makes sure the source folder exists, because Podman refuses a
// bind mount whose source is missing. A folder that exists is used wherever
// it is: the device's administrator made it, and the agent's user's rights
// bound what a container can do with it. A missing folder is created only
// under a host path root (--host-path-root): under the systemd unit the
// agent is an unprivileged user in a read-only file system
// (ProtectSystem=strict) and can create folders only where the unit lets it,
// StateDirectory=fleet-workloads, /var/lib/fleet-workloads.

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// defaultHostPathRoot is where a missing host path may be created when no
// --host-path-root is given: anywhere the agent's user may create a folder
// (a command line run by hand). The systemd unit names its roots.
const defaultHostPathRoot = "/"

// hostPathRoots is the repeatable --host-path-root flag.
type hostPathRoots []string

func (r *hostPathRoots) String() string { return strings.Join(*r, ",") }

func (r *hostPathRoots) Set(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("--host-path-root %q is not an absolute path: give the folder under which the agent creates missing volume host paths (e.g. /var/lib/fleet-workloads)", v)
	}
	*r = append(*r, filepath.Clean(v))
	return nil
}

// hostPathRootFlag registers --host-path-root on fs.
func hostPathRootFlag(fs *flag.FlagSet) *hostPathRoots {
	r := &hostPathRoots{}
	fs.Var(r, "host-path-root", "folder under which the agent creates a missing volumes[].host_path (repeatable; default: anywhere its user may); an existing host path is used wherever it is")
	return r
}

// ensure makes sure the volume host path p exists as a folder: an existing
// folder is used as it is, a missing one is created (mode 0755) when it
// lies under a root. Every error names volumes[].host_path and the fix.
func (r hostPathRoots) ensure(p string) error {
	roots := []string(r)
	if len(roots) == 0 {
		roots = []string{defaultHostPathRoot}
	}
	clean := filepath.Clean(p)
	fi, err := os.Stat(clean)
	switch {
	case err == nil && fi.IsDir():
		return nil
	case err == nil:
		return fmt.Errorf("volumes[].host_path %s exists but is not a folder: bind a folder (give another host_path, or replace the file on the device with a folder)", p)
	case !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("volumes[].host_path %s cannot be read by the agent (user %s): %w: give a folder that user may read", p, agentUser(), err)
	}
	if !under(clean, roots) {
		return fmt.Errorf("volumes[].host_path %s does not exist, and the agent creates missing host paths only under %s (--host-path-root): use a host path under %s, or create the folder on the device owned by the agent's user (install -d -o %s %s; under the systemd unit a drop-in with StateDirectory=<name> makes /var/lib/<name>)",
			p, strings.Join(roots, ", "), strings.TrimSuffix(roots[0], "/")+"/", agentUser(), clean)
	}
	if err := os.MkdirAll(clean, 0o755); err != nil {
		return fmt.Errorf("volumes[].host_path %s: the agent (user %s) cannot create it: %w: create the folder on the device owned by that user (install -d -o %s %s), or make %s writable for it",
			p, agentUser(), err, agentUser(), clean, strings.Join(roots, ", "))
	}
	return nil
}

// under reports whether the clean absolute path p is one of roots or lies
// below one.
func under(p string, roots []string) bool {
	for _, root := range roots {
		rel, err := filepath.Rel(root, p)
		if err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return true
		}
	}
	return false
}

// agentUser names the user the agent runs as, for messages.
func agentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}
