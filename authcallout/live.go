package authcallout

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// liveConn is a connection the callout authorised for a device.
type liveConn struct {
	server string // server id
	cid    uint64
	until  time.Time // the user JWT's expiry: the connection cannot outlive it
}

// live remembers the device connections this replica authorised, by
// identity subject, so they can be disconnected when the identity is
// quarantined or removed.
type live struct {
	mu    sync.Mutex // guards conns
	conns map[string]*liveList
}

// liveList is one identity's connections; expired ones are dropped when
// the list reaches pruneAt, which then doubles what is left (a device
// that reconnects often costs O(1) a connect, not O(its connections)).
type liveList struct {
	conns   []liveConn
	pruneAt int
}

func (l *live) add(subject string, c liveConn, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		l.conns = map[string]*liveList{}
	}
	ll := l.conns[subject]
	if ll == nil {
		ll = &liveList{}
		l.conns[subject] = ll
	}
	ll.conns = append(ll.conns, c)
	if len(ll.conns) < ll.pruneAt {
		return
	}
	keep := ll.conns[:0]
	for _, x := range ll.conns {
		if x.until.After(now) {
			keep = append(keep, x)
		}
	}
	clear(ll.conns[len(keep):])
	ll.conns = keep
	ll.pruneAt = max(8, 2*len(keep))
}

func (l *live) take(subject string) []liveConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	ll := l.conns[subject]
	delete(l.conns, subject)
	if ll == nil {
		return nil
	}
	return ll.conns
}

// kickSubject is the system request that disconnects a client by id.
func kickSubject(serverID string) string { return "$SYS.REQ.SERVER." + serverID + ".KICK" }

// watchIdentities core-subscribes to every fleet-identity change and
// disconnects the live connections of identities that become quarantined
// or are removed. The caller unsubscribes.
func (s *Service) watchIdentities(ctx context.Context) (*nats.Subscription, error) {
	prefix := "$KV." + events.BucketIdentity + "."
	sub, err := s.o.Watch.Subscribe(prefix+">", func(m *nats.Msg) {
		key, e := change(m, prefix)
		// Under the gate: every decision that read the value before this
		// change has registered its connection, and none reads it after
		// until the mirror holds the change.
		s.mirror.gate.Lock()
		s.mirror.update(key, e)
		var conns []liveConn
		if e.gone || e.entry.Quarantined {
			conns = s.live.take(key)
		}
		s.mirror.gate.Unlock()
		switch {
		case e.gone:
			s.kick(ctx, key, conns, "identity removed or invalid")
		case e.entry.Quarantined:
			s.kick(ctx, key, conns, "device quarantined")
		}
	})
	if err != nil {
		return nil, fmt.Errorf("authcallout: watch %s: %w", events.BucketIdentity, err)
	}
	if err := s.o.Watch.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("authcallout: watch %s: %w", events.BucketIdentity, err)
	}
	return sub, nil
}

// kick disconnects conns, the live connections of subject.
func (s *Service) kick(ctx context.Context, subject string, conns []liveConn, why string) {
	for _, c := range conns {
		if !c.until.After(time.Now()) {
			continue
		}
		req, _ := json.Marshal(map[string]uint64{"cid": c.cid})
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := s.o.System.RequestWithContext(rctx, kickSubject(c.server), req)
		cancel()
		if err != nil {
			s.log.Warn("live connection not disconnected", "subject", subject, "server", c.server, "cid", c.cid, "reason", why, "err", err)
			continue
		}
		s.log.Info("live connection disconnected", "subject", subject, "server", c.server, "cid", c.cid, "reason", why)
		s.o.Metrics.revoked()
	}
}
