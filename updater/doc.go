// Package updater is the root updater of a device (fleet-updater) and its
// client: a daemon on a Unix socket that runs a closed set of maintenance
// operations for the unprivileged agent, and the client the agent asks it
// with.
//
// It owns the socket protocol (Request, Response, DecodeRequest), the peer
// check (only the agent's uid may talk to it, proven by SO_PEERCRED), the
// task records (one JSON file per task id under the state folder, written
// atomically), and the two operations: system-upgrade (apt-get update and a
// non-interactive full-upgrade keeping existing configuration files, after
// repairing an interrupted dpkg) and agent-upgrade (download, sha256 check,
// side-by-side install, atomic switch of the agent's executable, restart,
// health check by the new agent's hello, restore of the previous
// executable when it does not come back).
//
// Invariants: every byte from the socket is hostile. A request is at most
// MaxRequestSize bytes, decodes with unknown fields, keys given twice and
// keys in another case than their field's refused, names one of a closed
// set of operations and never carries a command, a package name or a path:
// the commands and paths are fixed in code or come from the daemon's own
// flags. One operation runs at a time. A task id runs at most
// once, across restarts: its record is the authority, a repeated request
// gets the record, and a task the updater was stopped in is reported
// failed ("interrupted"), never run again. Operating-system packages are
// never rolled back.
//
// The agent imports this package for the Client (it links nothing beyond
// the standard library, golang.org/x/sys and events); cmd/fleet-updater
// runs the Server.
package updater
