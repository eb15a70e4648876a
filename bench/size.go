package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// size runs one size: ramp, rollout, the rollout under a flood (with
// flooders), floor.
func (b *bench) size(ctx context.Context, n int) (Result, error) {
	o, cp := b.o, b.cp
	res := Result{N: n}
	var err error
	res.Servers = b.o.Servers
	baseClients, err := cp.servers.clients(ctx)
	if err != nil {
		return res, err
	}
	if res.Consumers[0], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	res.MemBefore, res.ServerRSSBefore = measureMemory(), cp.servers.rss()
	if res.ServerHeapBefore, err = cp.servers.heap(ctx); err != nil {
		return res, err
	}

	agents, err := b.ramp(ctx, n, &res)
	defer stopChildren(agents)
	if err != nil {
		return res, err
	}
	o.Logger.Info("devices connected", "devices", n, "ramp", res.Ramp)

	fig, err := b.rollout(ctx, n, &res, nil)
	if err != nil {
		return res, err
	}
	res.Projected, res.Converged, res.Succeeded = fig.projected, fig.converged, fig.succeeded
	if o.Flooders > 0 {
		fr, err := b.flooded(ctx, n, &res)
		res.Flood = fr
		if err != nil {
			return res, fmt.Errorf("flood: %w", err)
		}
	}
	res.TokenLifetime = o.TokenLifetime
	if o.Hold > 0 {
		h, err := b.hold(ctx, n, &res)
		res.Hold = h
		if err != nil {
			return res, fmt.Errorf("hold: %w", err)
		}
	}
	if res.Consumers[2], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	if err := stopChildren(agents); err != nil {
		return res, err
	}
	if err := awaitClients(ctx, cp, baseClients, o.Timeout); err != nil {
		return res, err
	}

	if err := b.floor(ctx, n, &res); err != nil {
		return res, fmt.Errorf("floor: %w", err)
	}
	if err := awaitClients(ctx, cp, baseClients, o.Timeout); err != nil {
		return res, err
	}
	if res.Consumers[3], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// ramp starts the agent processes of devices 1..n and waits until every
// device connected and its agent runs (it reports its inventory after
// subscribing to its intent), filling res's ramp, connect, memory and
// consumer figures. It returns the agent processes, also with an error:
// the caller stops them.
func (b *bench) ramp(ctx context.Context, n int, res *Result) ([]*child, error) {
	o, cp := b.o, b.cp
	inventories := newCounter(n)
	sub, err := cp.monitor.Subscribe("fleet.report.*.inventory", func(m *nats.Msg) {
		if dev := token(m.Subject, 2); dev != "" && deviceIndex(dev) <= n {
			inventories.see(dev)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := cp.monitor.Flush(); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	res.RampWindow = time.Duration(float64(n) / o.ConnectRate * float64(time.Second))
	began := time.Now()
	var env []string
	if o.MemProfiles != "" {
		env = append(env, EnvChildMemProfile+"="+o.MemProfiles)
	}
	agents, err := b.children(modeAgents, n, res.RampWindow, env...)
	if err != nil {
		return nil, err
	}
	res.Children = len(agents)
	ready, err := awaitReady(ctx, agents, res.RampWindow+o.Timeout)
	if err != nil {
		return agents, fmt.Errorf("ramp: %w", err)
	}
	if err := await(ctx, inventories, res.RampWindow+o.Timeout, "agents reporting their inventory"); err != nil {
		return agents, fmt.Errorf("ramp: %w", err)
	}
	_, last := inventories.state()
	res.Ramp = last.Sub(began)
	// Flooders publish on their inventory subjects too: stop watching.
	_ = sub.Unsubscribe()
	lat := ready.Latencies
	res.ConnectP50, res.ConnectP99, res.ConnectMax = time.Duration(percentile(lat, 50))*time.Microsecond,
		time.Duration(percentile(lat, 99))*time.Microsecond, time.Duration(percentile(lat, 100))*time.Microsecond
	res.ConnectRetries, res.AgentRSS, res.AgentHeap, res.AgentStacks, res.AgentGoroutines = ready.Retries, ready.RSS, ready.Heap, ready.Stacks, ready.Goroutines
	res.MemAfter, res.ServerRSSAfter = measureMemory(), cp.servers.rss()
	if res.ServerHeapAfter, err = cp.servers.heap(ctx); err != nil {
		return agents, err
	}
	if o.MemProfiles != "" {
		if err := cp.servers.heapProfiles(ctx, o.MemProfiles); err != nil {
			return agents, err
		}
	}
	if res.Consumers[1], err = cp.servers.consumers(ctx); err != nil {
		return agents, err
	}
	return agents, nil
}
