package presence

// Inject records a connection as a connect event would, for tests of a
// lost disconnect: the reconciliation must forget it.
func (t *Tracker) Inject(server string, cid uint64, device string) {
	t.mu.Lock()
	t.seq++
	changed := t.add(connKey{server, cid}, device)
	t.mu.Unlock()
	t.notify(changed)
}

// Conns is how many connections of device the tracker knows.
func (t *Tracker) Conns(device string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.conns {
		if c.device == device {
			n++
		}
	}
	return n
}
