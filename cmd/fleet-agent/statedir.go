package main

import (
	"path/filepath"
	"strings"
)

// stateDirName is the agent's own StateDirectory= in the systemd unit.
const stateDirName = "fleet-agent"

// stateDirFromEnv is the default of --state-dir from $STATE_DIRECTORY,
// which systemd sets to the unit's StateDirectory= folders joined by ":":
// the one named fleet-agent, else the only one; "" when none or several
// others.
func stateDirFromEnv(v string) string {
	dirs := strings.Split(v, ":")
	for _, d := range dirs {
		if filepath.Base(d) == stateDirName {
			return d
		}
	}
	if len(dirs) == 1 {
		return dirs[0]
	}
	return ""
}
