package agent

import (
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// settleMark is when the last report of one key (offlineKey: a
// Deployment's workload or health report, the inventory, the container
// snapshot) went out, on which connection (the client's reconnect count
// then), and whether it settled.
type settleMark struct {
	at         time.Time
	reconnects uint64
	settled    bool
}

// Keys of the reports a reconnect may send again besides the workload and
// health reports (offlineKey of the inventory and of a container snapshot).
var (
	inventoryKey  = string(events.TypeDeviceInventory)
	containersKey = string(events.TypeDeviceContainers)
)

// sentOn records that the report of key went out now on the current
// connection: it is unsettled until that connection stays up an echo
// window after it (settle).
func (d *daemon) sentOn(key string, now time.Time) {
	n := d.o.Conn.Stats().Reconnects
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.marks == nil {
		d.marks = map[string]*settleMark{}
	}
	d.marks[key] = &settleMark{at: now, reconnects: n}
}

// settle marks settled every report that went out at least EchoWindow
// before now on the connection that is still up: it and its echoes had
// the whole window to be stored, as on a connection that never breaks,
// so a later reconnect need not send it again. Run on the echo ticks.
func (d *daemon) settle(now time.Time) {
	if !d.o.Conn.IsConnected() {
		return
	}
	n := d.o.Conn.Stats().Reconnects
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.marks {
		if !m.settled && m.reconnects == n && now.Sub(m.at) >= d.o.EchoWindow {
			m.settled = true
		}
	}
}

// maxServers bounds the server ids a daemon remembers (servers).
const maxServers = 16

// connectedTo records the server the connection is on now (its server
// id, new at every start of a server process). A server the agent was
// never connected to before may be one whose streams were restarted
// empty or restored (a full cluster restart gives every server a new id):
// every report is then unsettled and a reconnect sends them all again,
// so the projections converge again without the streams' history
// (operations.md, backups). A server seen before kept its streams.
func (d *daemon) connectedTo(id string) {
	if id == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if slices.Contains(d.servers, id) {
		return
	}
	for _, m := range d.marks {
		m.settled = false
	}
	if len(d.servers) > 0 {
		// Its streams may hold the intent below the sequence applied
		// (rebase.go); a value the last server notified is read again.
		d.rebase, d.lowerSince, d.stored = true, time.Time{}, nil
	}
	d.servers = append(d.servers, id)
	if len(d.servers) > maxServers {
		d.servers = slices.Delete(d.servers, 0, len(d.servers)-maxServers)
	}
}

// unsettled reports whether the last report of key may have been lost
// with a connection (it went out on one that broke within its echo
// window), or never went out: a reconnect sends it again.
func (d *daemon) unsettled(key string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.marks[key]
	return !ok || !m.settled
}

// resendable reports whether key (offlineKey) names a report a reconnect
// may send again: a workload or health report, the inventory, the
// container snapshot. The others (commands, tasks, heartbeats) are not
// marked, so the marks stay one per Deployment and two more.
func resendable(key string) bool {
	return strings.HasPrefix(key, "workload/") || strings.HasPrefix(key, "health/") || key == inventoryKey || key == containersKey
}

// healthKey is the offlineKey of k's health reports.
func healthKey(k depKey) string { return "health/" + k.ns + "/" + k.name }
