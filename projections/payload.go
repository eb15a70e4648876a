package projections

import (
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Payload is one event whose data is decoded at most once, however many
// folds read it: a reader that routes a report by its Deployment, then folds
// it into a Rollout and an Intent, decodes its JSON once instead of once per
// step. Each fold asks for the data struct it asked events.Decode for
// before, and gets the same value and the same error, so folding a Payload
// is folding its Event.
//
// The decoded slices (a revision's targets, a release's list, the score)
// are shared by every fold that reads them; the folds never change them.
// Build one with NewPayload and pass its address to the folds (it is
// meant to live on the caller's stack, one per event).
type Payload struct {
	// Event is the event being folded.
	Event events.Event
	// Stored is when the stream stored the event (events.Record.Stored);
	// zero when unknown. The rollout fold's progress clock takes a report's
	// time from it, never from the device's clock (Rollout.ProgressAt).
	Stored time.Time

	done       uint8 // the slots below that were decoded, a bit each
	report     decoded[events.WorkloadStatus]
	revision   decoded[events.DeploymentRevisionCreated]
	deleted    decoded[events.DeploymentDeleted]
	transition decoded[events.RolloutTransition]
	taskRun    decoded[events.TaskRunCreated]
	taskDelete decoded[events.TaskRunDeleted]
	health     decoded[events.WorkloadHealth]
}

type decoded[T events.Data] struct {
	v   T
	err error
}

const (
	slotReport uint8 = 1 << iota
	slotRevision
	slotDeleted
	slotTransition
	slotTaskRun
	slotTaskDelete
	slotHealth
)

// NewPayload returns ev to fold, its data not decoded yet.
func NewPayload(ev events.Event) Payload { return Payload{Event: ev} }

// NewStoredPayload is NewPayload of the record rec: its event and the
// stream's stored time.
func NewStoredPayload(rec events.Record) Payload {
	return Payload{Event: rec.Event, Stored: rec.Stored}
}

// once decodes p's data as T with decode (events.Decode[T], instantiated
// by the caller: called through the generic once, the compiler would not
// know the Payload does not escape, and every Payload would move to the
// heap) the first time and returns the memo after.
func once[T events.Data](p *Payload, slot uint8, d *decoded[T], decode func(events.Event) (T, error)) (T, error) {
	if p.done&slot == 0 {
		d.v, d.err = decode(p.Event)
		p.done |= slot
	}
	return d.v, d.err
}

// WorkloadStatus is events.Decode[events.WorkloadStatus] of the event,
// decoded once.
func (p *Payload) WorkloadStatus() (events.WorkloadStatus, error) {
	return once(p, slotReport, &p.report, events.Decode[events.WorkloadStatus])
}

// RevisionCreated is events.Decode[events.DeploymentRevisionCreated] of
// the event, decoded once.
func (p *Payload) RevisionCreated() (events.DeploymentRevisionCreated, error) {
	return once(p, slotRevision, &p.revision, events.Decode[events.DeploymentRevisionCreated])
}

// DeploymentDeleted is events.Decode[events.DeploymentDeleted] of the
// event, decoded once.
func (p *Payload) DeploymentDeleted() (events.DeploymentDeleted, error) {
	return once(p, slotDeleted, &p.deleted, events.Decode[events.DeploymentDeleted])
}

// RolloutTransition is events.Decode[events.RolloutTransition] of the
// event, decoded once.
func (p *Payload) RolloutTransition() (events.RolloutTransition, error) {
	return once(p, slotTransition, &p.transition, events.Decode[events.RolloutTransition])
}

// TaskRunCreated is events.Decode[events.TaskRunCreated] of the event,
// decoded once.
func (p *Payload) TaskRunCreated() (events.TaskRunCreated, error) {
	return once(p, slotTaskRun, &p.taskRun, events.Decode[events.TaskRunCreated])
}

// TaskRunDeleted is events.Decode[events.TaskRunDeleted] of the event,
// decoded once.
func (p *Payload) TaskRunDeleted() (events.TaskRunDeleted, error) {
	return once(p, slotTaskDelete, &p.taskDelete, events.Decode[events.TaskRunDeleted])
}

// WorkloadHealth is events.Decode[events.WorkloadHealth] of the event (a
// device.workload.degraded or device.workload.recovered report), decoded
// once.
func (p *Payload) WorkloadHealth() (events.WorkloadHealth, error) {
	return once(p, slotHealth, &p.health, events.Decode[events.WorkloadHealth])
}
