package runtime

import "time"

// EventKind is what happened to a container, as a ContainerEvent says it.
type EventKind string

// Container event kinds.
const (
	// EventDied: the container's process ended (a crash, an exit, an OOM
	// kill, or a stop or removal: the engine tells none of them apart).
	// ContainerEvent.ExitCode is its exit code. Whether it was OOM-killed
	// is read with Inspect afterwards.
	EventDied EventKind = "died"
	// EventStart: the container started, by a Start call or by the
	// engine acting on its restart policy.
	EventStart EventKind = "start"
	// EventHealth: a health check of the container ran.
	// ContainerEvent.Health is the status the engine put in the event,
	// which may lag one check behind (Podman 4.3 sends the status from
	// before the check): read the health with Inspect.
	EventHealth EventKind = "health"
	// EventRemoved: the container was removed.
	EventRemoved EventKind = "removed"
	// EventLost: events were dropped, because the reader fell behind or
	// the engine's stream broke; the reader must List to learn the
	// state. Its ID and Name are empty.
	EventLost EventKind = "lost"
)

// WatchBuffer is the capacity of the channel Runtime.Watch returns: how
// many events wait for a slow reader before the oldest are dropped.
const WatchBuffer = 64

// MaxLogLine is the most bytes of one line Runtime.Logs returns; the rest
// of a longer line is dropped, so that a container printing without line
// ends cannot make the reader hold its whole output.
const MaxLogLine = 8 << 10

// ContainerEvent is one thing that happened to a watched container.
type ContainerEvent struct {
	// ID and Name of the container; empty for EventLost.
	ID   string
	Name string
	// Kind says what happened.
	Kind EventKind
	// ExitCode is the exit code of EventDied (128 + the signal for a
	// container a signal ended); 0 for the other kinds.
	ExitCode int
	// Health is the health status of EventHealth (HealthStarting,
	// HealthHealthy, HealthUnhealthy); empty for the other kinds.
	Health string
	// Time is when the engine saw it; zero when the runtime has no clock
	// (the simulated runtime without Options.Now).
	Time time.Time
}

// Deliver sends e on ch, a buffered channel of capacity 2 or more that a
// Watch returned, without ever blocking: when ch is full it drops the two
// oldest events waiting in it and sends an EventLost, then e. The reader
// thus always gets the newest event and learns that some were lost. ch
// must have one sender at a time.
func Deliver(ch chan ContainerEvent, e ContainerEvent) {
	select {
	case ch <- e:
		return
	default:
	}
	for range 2 {
		select {
		case <-ch:
		default:
		}
	}
	lost := ContainerEvent{Kind: EventLost, Time: e.Time}
	for _, ev := range []ContainerEvent{lost, e} {
		select {
		case ch <- ev:
		default: // only when the capacity is below 2
		}
	}
}
