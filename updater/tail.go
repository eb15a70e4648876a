package updater

import (
	"sync"

	"github.com/nationtech/harmony-fleet/events"
)

// tailBuffer keeps the last max bytes written to it; safe for concurrent
// writers (a command's stdout and stderr).
type tailBuffer struct {
	mu  sync.Mutex // guards buf
	buf []byte
	max int
}

func newTail() *tailBuffer { return &tailBuffer{max: events.MaxTaskOutput} }

// Write implements io.Writer; it never fails.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return n, nil
}

// String returns what is kept, valid UTF-8 cut at the start when needed.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	for len(b) > 0 && b[0]&0xC0 == 0x80 { // a rune cut in half
		b = b[1:]
	}
	return string(b)
}
