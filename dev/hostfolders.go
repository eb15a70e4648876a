package dev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/containers/podman/v5/pkg/bindings/system"
	"golang.org/x/sys/unix"
)

// ExampleHostFolders are the host folders the examples' volumes are under
// (examples/*.yaml and the reference program): under /var/tmp, where every
// user may create them, so a rootless engine makes them on first use.
var ExampleHostFolders = []string{"/var/tmp/fleet-examples", "/var/tmp/harmony-example"}

// exampleFolderNotes names each folder of dirs that exists but holds
// something writable reports not writable (the folder itself or anything
// in it), with the fix: a rootless engine's containers write as the user,
// so the rollouts that mount it would fail. A missing folder is no
// problem: the engine makes it.
func exampleFolderNotes(dirs []string, writable func(path string) bool) []string {
	var notes []string
	for _, d := range dirs {
		blocked := false
		err := filepath.WalkDir(d, func(p string, _ fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && p == d {
					return filepath.SkipAll
				}
				blocked = true
				return filepath.SkipAll
			}
			if !writable(p) {
				blocked = true
				return filepath.SkipAll
			}
			return nil
		})
		if err != nil || blocked {
			notes = append(notes, d+" is not writable by you (an earlier run as root?): the rollouts using it fail on the Podman device; run: sudo chown -R \"$USER\" "+d)
		}
	}
	return notes
}

// writableByMe reports whether this process may write path (access(2)).
func writableByMe(path string) bool { return unix.Access(path, unix.W_OK) == nil }

// rootless reports whether the engine runs rootless: its containers'
// root is the engine's user on the host, who must be able to write the
// volumes' host folders.
func (e *podmanEngine) rootless(ctx context.Context) (bool, error) {
	info, err := system.Info(mergeConn(ctx, e.conn), nil)
	if err != nil {
		return false, fmt.Errorf("podman info: %w", err)
	}
	return info.Host.Security.Rootless, nil
}
