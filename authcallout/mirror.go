package authcallout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// maxMirrored bounds the identities the mirror holds (about 100 bytes
// each); beyond it, lookups of identities not held read the bucket.
const maxMirrored = 1 << 20

// mirror is the replica's in-memory copy of the fleet-identity entries it
// has read, kept current by the live-revocation subscription, so that a
// reconnect does not pay a JetStream round trip. It is used only while it
// provably has every change since it was filled:
//
//   - an entry enters it from a direct get, unless the subscription has
//     delivered a value for that key meanwhile (which is at least as new);
//   - every change the subscription delivers replaces the entry (a
//     deletion, purge or undecodable value is kept as "unknown");
//   - it is emptied, and bypassed, whenever the subscription may have
//     missed a message: while the watch connection is not connected, after
//     every reconnect (messages published meanwhile are lost to a core
//     subscription) and when the subscription dropped messages (slow
//     consumer).
//
// Quarantine stays immediate for what the server decides on (the direct
// get reads the stored value), and for what this replica decided on: the
// subscription handler holds gate for writing while it replaces the entry,
// and a decision holds it for reading from its lookup until its connection
// is registered in live, so a connect authorised from the value before
// the change is registered before the change takes the live connections
// to disconnect, and is disconnected with them.
type mirror struct {
	gate sync.RWMutex // see the type's comment

	mu      sync.Mutex // guards the fields below
	entries map[string]mirrored
	// reconnects and dropped are the watch connection's reconnect count
	// and the subscription's dropped count when entries were last valid.
	reconnects uint64
	dropped    int
	// epoch counts the times entries were emptied for missed messages: a
	// direct get started in an earlier epoch is not stored.
	epoch uint64
}

// mirrored is one key's entry: the decoded value, or gone (deleted,
// purged or undecodable: an unknown identity).
type mirrored struct {
	entry events.IdentityEntry
	gone  bool
}

// valid empties the mirror when the subscription may have missed a
// message and reports whether it may be used now. Called with mu held.
func (m *mirror) valid(nc *nats.Conn, sub *nats.Subscription) bool {
	if nc == nil || sub == nil || !nc.IsConnected() {
		m.invalidate()
		return false
	}
	rc := nc.Stats().Reconnects
	dropped, err := sub.Dropped()
	if err != nil {
		m.invalidate()
		return false
	}
	if rc != m.reconnects || dropped != m.dropped {
		m.invalidate()
		m.reconnects, m.dropped = rc, dropped
	}
	return true
}

// invalidate empties the mirror and starts a new epoch. Called with mu
// held.
func (m *mirror) invalidate() {
	clear(m.entries)
	m.epoch++
}

// lookup returns the mirrored entry of key when there is one and the
// mirror is valid, and the epoch a direct get started now belongs to.
func (m *mirror) lookup(nc *nats.Conn, sub *nats.Subscription, key string) (mirrored, bool, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid(nc, sub) {
		return mirrored{}, false, m.epoch
	}
	e, ok := m.entries[key]
	return e, ok, m.epoch
}

// fill stores what a direct get started in epoch read for key, unless the
// subscription delivered a value for it meanwhile or the mirror was
// emptied since (the get may predate a missed message).
func (m *mirror) fill(nc *nats.Conn, sub *nats.Subscription, key string, e mirrored, epoch uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.valid(nc, sub) || m.epoch != epoch {
		return
	}
	if _, ok := m.entries[key]; ok || len(m.entries) >= maxMirrored {
		return
	}
	if m.entries == nil {
		m.entries = map[string]mirrored{}
	}
	m.entries[key] = e
}

// update stores a change the subscription delivered. Called with gate
// held for writing.
func (m *mirror) update(key string, e mirrored) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.entries == nil {
		m.entries = map[string]mirrored{}
	}
	if _, ok := m.entries[key]; !ok && len(m.entries) >= maxMirrored {
		return
	}
	m.entries[key] = e
}

// change decodes a message of the live-revocation subscription.
func change(m *nats.Msg, prefix string) (key string, e mirrored) {
	key = strings.TrimPrefix(m.Subject, prefix)
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return key, mirrored{gone: true}
	}
	v, err := decodeIdentity(m.Data)
	if err != nil {
		return key, mirrored{gone: true}
	}
	return key, mirrored{entry: v}
}

// lookupIdentity reads subject's identity from the mirror when it holds it
// and is valid, else from Options.Identities (filling the mirror). Without
// live revocation there is no mirror.
func (s *Service) lookupIdentity(ctx context.Context, subject string) (events.IdentityEntry, error) {
	sub := s.watchSub.Load()
	if sub == nil {
		return s.o.Identities.Lookup(ctx, subject)
	}
	key, err := events.IdentityKey(subject)
	if err != nil {
		return s.o.Identities.Lookup(ctx, subject) // refuses it with the reader's error
	}
	e, ok, epoch := s.mirror.lookup(s.o.Watch, sub, key)
	if ok {
		if e.gone {
			return events.IdentityEntry{}, fmt.Errorf("%w: %s", ErrUnknownIdentity, subject)
		}
		return e.entry, nil
	}
	v, err := s.o.Identities.Lookup(ctx, subject)
	switch {
	case err == nil:
		s.mirror.fill(s.o.Watch, sub, key, mirrored{entry: v}, epoch)
	case errors.Is(err, ErrUnknownIdentity):
		s.mirror.fill(s.o.Watch, sub, key, mirrored{gone: true}, epoch)
	}
	return v, err
}
