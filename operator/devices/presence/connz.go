package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// connzRequest is what the tracker asks of a server's connection list of
// the device account: one page, with each connection's authorized user.
// Name and ExactMatch (the servers' event filter) direct a request to one
// server: the next pages of its list.
type connzRequest struct {
	Auth       bool   `json:"auth"`
	Offset     int    `json:"offset"`
	Limit      int    `json:"limit"`
	Name       string `json:"server_name,omitempty"`
	ExactMatch bool   `json:"exact_match,omitempty"`
}

// connzReply is what the tracker reads of a server's answer.
type connzReply struct {
	Server serverInfo `json:"server"`
	Data   *struct {
		ID    string `json:"server_id"`
		Total int    `json:"total"`
		Conns []struct {
			Cid uint64 `json:"cid"`
			// AuthorizedUser is the server's: the callout-issued user
			// JWT's name. Name (the device's choice) is never read.
			AuthorizedUser string `json:"authorized_user"`
			Account        string `json:"account"`
			Kind           string `json:"kind"`
		} `json:"connections"`
	} `json:"data"`
	Error *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// serverConns is one server's whole list: cid → device.
type serverConns struct {
	name  string
	conns map[uint64]string
}

// resync reads every server's connection list of the device account
// (the first page from all at once, the next ones from each server
// alone) and makes the view what they hold, keeping what events said
// since it started: a connection that went while the lists were read is
// not brought back, one that came is kept.
func (t *Tracker) resync(ctx context.Context) error {
	t.mu.Lock()
	start := t.seq
	t.mu.Unlock()
	first, err := t.gather(ctx, connzRequest{Auth: true, Limit: t.o.PageSize}, 0)
	if err != nil {
		return err
	}
	lists := map[string]*serverConns{}
	for _, r := range first {
		s := &serverConns{name: r.Server.Name, conns: map[uint64]string{}}
		t.take(s, r)
		for off := len(r.Data.Conns); off < r.Data.Total; {
			page, err := t.gather(ctx, connzRequest{Auth: true, Offset: off, Limit: t.o.PageSize, Name: r.Server.Name, ExactMatch: true}, 1)
			if err != nil {
				return fmt.Errorf("server %s, from connection %d: %w", r.Server.Name, off, err)
			}
			if len(page) == 0 || len(page[0].Data.Conns) == 0 {
				break // the list shrank meanwhile
			}
			t.take(s, page[0])
			off += len(page[0].Data.Conns)
		}
		lists[r.Server.ID] = s
	}
	t.merge(start, lists)
	return nil
}

func (t *Tracker) take(s *serverConns, r connzReply) {
	for _, c := range r.Data.Conns {
		if c.AuthorizedUser == "" || (c.Account != "" && c.Account != t.o.Account) || (c.Kind != "" && c.Kind != "Client") {
			continue
		}
		s.conns[c.Cid] = c.AuthorizedUser
	}
}

// merge applies the lists read since event count start.
func (t *Tracker) merge(start uint64, lists map[string]*serverConns) {
	var changed []string
	t.mu.Lock()
	t.seq++
	for k, c := range t.conns {
		if c.seq > start {
			continue // learned while the lists were read
		}
		s := lists[k.server]
		if s == nil {
			// A server that did not answer twice in a row is gone
			// (crashed, or restarted with a new id).
			if t.missed[k.server] < 1 {
				continue
			}
			changed = append(changed, t.remove(k, 0)...)
			continue
		}
		if dev, ok := s.conns[k.cid]; !ok || dev != c.device {
			changed = append(changed, t.remove(k, 0)...)
		}
	}
	missing := map[string]bool{}
	for k := range t.conns {
		if lists[k.server] == nil {
			missing[k.server] = true
		}
	}
	for srv := range t.missed {
		if !missing[srv] {
			delete(t.missed, srv)
		}
	}
	for srv := range missing {
		t.missed[srv]++
	}
	for id, s := range lists {
		for cid, dev := range s.conns {
			k := connKey{id, cid}
			if g, ok := t.gone[k]; ok && g > start {
				continue // went while the lists were read
			}
			if _, ok := t.conns[k]; !ok {
				changed = append(changed, t.add(k, dev)...)
			}
		}
	}
	for k, g := range t.gone {
		if g <= start {
			delete(t.gone, k)
		}
	}
	t.mu.Unlock()
	t.notify(changed)
}

// gather sends req to the device account's connection lists and returns
// the servers' answers: up to want of them (0: every server's, until none
// came for Quiet after the last), within Timeout.
func (t *Tracker) gather(ctx context.Context, req connzRequest, want int) ([]connzReply, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("presence: connz request: %w", err)
	}
	inbox := t.o.Conn.NewRespInbox()
	sub, err := t.o.Conn.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("presence: connz: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := t.o.Conn.PublishRequest(t.connzSubject(), inbox, body); err != nil {
		return nil, fmt.Errorf("presence: connz: %w", err)
	}
	deadline := time.Now().Add(t.o.Timeout)
	var out []connzReply
	for want == 0 || len(out) < want {
		wait := time.Until(deadline)
		if len(out) > 0 && want == 0 {
			wait = min(wait, t.o.Quiet)
		}
		if wait <= 0 {
			break
		}
		mctx, cancel := context.WithTimeout(ctx, wait)
		m, err := sub.NextMsgWithContext(mctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			break
		}
		var r connzReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			return nil, fmt.Errorf("presence: connz reply: %w", err)
		}
		if r.Error != nil {
			return nil, fmt.Errorf("presence: connz reply of %s: %d %s", r.Server.Name, r.Error.Code, r.Error.Description)
		}
		if r.Data == nil || r.Server.ID == "" {
			continue
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("presence: no server answered %s within %s: %w", t.connzSubject(), t.o.Timeout, nats.ErrTimeout)
	}
	return out, nil
}
