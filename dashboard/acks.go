package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Ack is an alert's acknowledgement.
type Ack struct {
	Alert string
	User  string
	Time  time.Time
}

// Acks holds alert acknowledgements.
type Acks interface {
	// Acknowledge records that u acknowledged alert id.
	Acknowledge(ctx context.Context, alert string, u User) (Ack, error)
	// All returns every acknowledgement by alert id.
	All(ctx context.Context) (map[string]Ack, error)
}

// MaxAlertID bounds an alert id the dashboard accepts.
const MaxAlertID = 512

// StreamAcks keeps acknowledgements as dashboard.alert.acknowledged events
// in FLEET_AUDIT: the last event of each alert's subject. They survive a
// restart because the stream does.
type StreamAcks struct {
	store *events.Store
	log   *slog.Logger
}

// NewStreamAcks returns acknowledgements kept in the streams of store.
func NewStreamAcks(store *events.Store, log *slog.Logger) (*StreamAcks, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: NewStreamAcks needs an event store", ErrInvalidOptions)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &StreamAcks{store: store, log: log}, nil
}

// Acknowledge implements Acks.
func (a *StreamAcks) Acknowledge(ctx context.Context, alert string, u User) (Ack, error) {
	if alert == "" || len(alert) > MaxAlertID {
		return Ack{}, fmt.Errorf("%w: alert: give the id of an alert (1 to %d bytes)", ErrInvalidInput, MaxAlertID)
	}
	ev, err := events.New(events.Keys{Name: events.AlertKey(alert)}, events.DashboardAlertAcknowledged{Alert: alert, User: u.Name, UserSubject: u.Subject})
	if err != nil {
		return Ack{}, err
	}
	if _, err := a.store.Append(ctx, ev); err != nil {
		return Ack{}, fmt.Errorf("store the acknowledgement: %w", err)
	}
	a.log.Info("alert acknowledged", "alert", alert, "user", u.Name, "user_subject", u.Subject, "event", ev.ID.String())
	return Ack{Alert: alert, User: u.Name, Time: ev.Time}, nil
}

// All implements Acks: one batched direct get of the last event of every
// alert subject.
func (a *StreamAcks) All(ctx context.Context) (map[string]Ack, error) {
	recs, err := a.store.LastPerSubject(ctx, events.DashboardAlertsFilter)
	if err != nil {
		return nil, fmt.Errorf("read the acknowledgements: %w", err)
	}
	out := make(map[string]Ack, len(recs))
	for _, rec := range recs {
		d, err := events.Decode[events.DashboardAlertAcknowledged](rec.Event)
		if err != nil {
			var re *events.RecordError
			if !errors.As(err, &re) {
				a.log.Warn("an acknowledgement does not decode", "subject", rec.Subject, "sequence", rec.Sequence)
			}
			continue
		}
		out[d.Alert] = Ack{Alert: d.Alert, User: d.User, Time: rec.Event.Time}
	}
	return out, nil
}

// MemoryAcks keeps acknowledgements in memory (serve-web --mock).
type MemoryAcks struct {
	mu sync.Mutex
	// acks by alert id; guarded by mu.
	acks map[string]Ack
}

// NewMemoryAcks returns acknowledgements kept in memory.
func NewMemoryAcks() *MemoryAcks { return &MemoryAcks{acks: map[string]Ack{}} }

// Acknowledge implements Acks.
func (m *MemoryAcks) Acknowledge(_ context.Context, alert string, u User) (Ack, error) {
	if alert == "" || len(alert) > MaxAlertID {
		return Ack{}, fmt.Errorf("%w: alert: give the id of an alert (1 to %d bytes)", ErrInvalidInput, MaxAlertID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ack := Ack{Alert: alert, User: u.Name, Time: time.Now().UTC()}
	m.acks[alert] = ack
	return ack, nil
}

// All implements Acks.
func (m *MemoryAcks) All(context.Context) (map[string]Ack, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Ack, len(m.acks))
	for k, v := range m.acks {
		out[k] = v
	}
	return out, nil
}
