package bench

import (
	"slices"
	"time"
)

// Result is what one size measured.
type Result struct {
	// N is the number of devices.
	N int
	// Children is the number of child processes the devices ran in.
	Children int
	// Ramp is the time from starting the children until every device had
	// connected through the callout and its agent had reported its
	// inventory; RampWindow is the jitter window the connects were spread
	// over.
	Ramp, RampWindow time.Duration
	// ConnectP50, P99 and Max are the devices' connect times (key file,
	// token grant, callout), ConnectRetries the failed attempts retried.
	ConnectP50, ConnectP99, ConnectMax time.Duration
	ConnectRetries                     int
	// Projected is the time from the revision's append until the rollout
	// runner had written every device's fleet-intent value; Converged until
	// every device had reported the revision Converged (workload reports
	// seen on the server); Succeeded until the runner appended
	// rollout.succeeded.
	Projected, Converged, Succeeded time.Duration
	// FloorAsync is the raw floor: N KV puts (published asynchronously) to
	// N plain subscribers, until every subscriber's answer was seen (the
	// better of two rounds, FloorAsyncRounds, one before and one after the
	// synchronous round); FloorSync the same with one synchronous put after
	// the other, as the runner writes.
	FloorAsync, FloorSync time.Duration
	FloorAsyncRounds      [2]time.Duration
	// FloorStoredAsync and FloorStoredSync are the same puts until every
	// subscriber answered the value's copy the bucket republishes once it
	// is stored (and synced): the floor of storing a value before its
	// device sees it, as the product does (a device is notified by the
	// fleet-intent bucket's republish).
	FloorStoredAsync, FloorStoredSync time.Duration
	// MemBefore and MemAfter are this (the control plane's) process's
	// memory before the devices connected and once they all had: with the
	// embedded server, the server's too.
	MemBefore, MemAfter memory
	// Servers is the number of nats-server processes (0: the embedded
	// server); ServerRSSBefore and ServerRSSAfter their resident memory,
	// summed, at the same moments as MemBefore and MemAfter.
	Servers                         int
	ServerRSSBefore, ServerRSSAfter uint64
	// ServerHeapBefore and ServerHeapAfter are the nats-server processes'
	// Go heap in use after a forced collection and goroutine stacks,
	// summed, at the same moments (zero with the embedded server:
	// MemBefore and MemAfter hold it).
	ServerHeapBefore, ServerHeapAfter serverMemory
	// AgentRSS is the agent processes' resident memory once every device
	// had connected, summed; AgentHeap and AgentStacks their Go heap in
	// use (after a forced collection) and goroutine stacks right after,
	// AgentGoroutines their goroutines.
	AgentRSS, AgentHeap, AgentStacks uint64
	AgentGoroutines                  int
	// Consumers counts the server's JetStream consumers: before the devices
	// connected, once they had, once they converged, after the floor.
	Consumers [4]int
	// Skipped counts the workload reports and rollout transitions the
	// measurement saw that do not decode for their subject (skipped, and
	// logged as warnings).
	Skipped uint64
	// Flood is the rollout under a flood (Options.Flooders); nil without
	// flooders.
	Flood *FloodResult
	// Hold is the steady state kept after the rollout (Options.Hold); nil
	// without one. TokenLifetime is the run's id_token lifetime.
	Hold          *HoldResult
	TokenLifetime time.Duration
}

// RatioStored is Converged / FloorStoredAsync.
func (r Result) RatioStored() float64 {
	if r.FloorStoredAsync <= 0 {
		return 0
	}
	return float64(r.Converged) / float64(r.FloorStoredAsync)
}

// Ratio is Converged / FloorAsync.
func (r Result) Ratio() float64 {
	if r.FloorAsync <= 0 {
		return 0
	}
	return float64(r.Converged) / float64(r.FloorAsync)
}

// PerDevice is the control plane process's growth per connected device:
// RSS and Go heap, bytes (with the embedded server, the server's too).
func (r Result) PerDevice() (rss, heap int64) {
	return (int64(r.MemAfter.RSS) - int64(r.MemBefore.RSS)) / int64(r.N), (int64(r.MemAfter.Heap) - int64(r.MemBefore.Heap)) / int64(r.N)
}

// ServerRSSPerDevice is the nats-server processes' RSS growth per
// connected device, bytes (0 with the embedded server).
func (r Result) ServerRSSPerDevice() int64 {
	return (int64(r.ServerRSSAfter) - int64(r.ServerRSSBefore)) / int64(r.N)
}

// ServerHeapPerDevice is the nats-server processes' Go heap growth per
// connected device, bytes (0 with the embedded server).
func (r Result) ServerHeapPerDevice() int64 {
	return (int64(r.ServerHeapAfter.Heap) - int64(r.ServerHeapBefore.Heap)) / int64(r.N)
}

// ServerStacksPerDevice is the nats-server processes' goroutine stack
// growth per connected device, bytes (0 with the embedded server).
func (r Result) ServerStacksPerDevice() int64 {
	return (int64(r.ServerHeapAfter.Stacks) - int64(r.ServerHeapBefore.Stacks)) / int64(r.N)
}

// ConsumersGrew reports whether the consumer count grew with the devices.
func (r Result) ConsumersGrew() bool {
	return slices.Max(r.Consumers[1:]) > r.Consumers[0]
}
