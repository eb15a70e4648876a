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
