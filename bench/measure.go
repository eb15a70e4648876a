package bench

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// memory is the parent process's memory at one moment, after a forced
// garbage collection.
type memory struct {
	RSS  uint64 // resident set size, bytes
	Heap uint64 // Go heap in use, bytes
}

func measureMemory() memory {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{RSS: processRSS(), Heap: ms.HeapInuse}
}

// processRSS is this process's VmRSS in bytes (0 when unknown).
func processRSS() uint64 { return statusRSS("/proc/self/status") }

// consumers is the number of JetStream consumers on the server, every
// account and stream.
func consumers(s *server.Server) (int, error) {
	info, err := s.Jsz(&server.JSzOptions{})
	if err != nil {
		return 0, err
	}
	return info.Consumers, nil
}

// counter records when each of a set of distinct keys was first seen, and
// when the target count was reached.
type counter struct {
	mu     sync.Mutex // guards the fields below
	target int
	seen   map[string]bool
	last   time.Time
	done   chan struct{}
	closed bool
}

func newCounter(target int) *counter {
	return &counter{target: target, seen: make(map[string]bool, target), done: make(chan struct{})}
}

// see records key; it reports whether the key is new.
func (c *counter) see(key string) bool {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[key] {
		return false
	}
	c.seen[key] = true
	c.last = now
	if len(c.seen) >= c.target && !c.closed {
		c.closed = true
		close(c.done)
	}
	return true
}

// has reports whether key was seen.
func (c *counter) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[key]
}

// state returns how many keys were seen and when the last new one was.
func (c *counter) state() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), c.last
}

// percentile returns the p-th percentile (0..100) of sorted values.
func percentile(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}
