package fleetview

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections/runner"
)

// Subject filters the live View follows.
var (
	filterHeartbeats = []string{"fleet.report.*.heartbeat"}
	filterReports    = []string{"fleet.report.*.workload", "fleet.report.*.task", "fleet.report.*.command", "fleet.report.*.health"}
	filterContainers = []string{"fleet.report.*.containers"}
	filterIntent     = []string{"fleet.intent.>"}
	filterRollout    = []string{"fleet.rollout.>"}
	filterInventory  = []string{"fleet.report.*.inventory"}
	filterCommands   = []string{"fleet.command.*"}
)

// retryAfter is how long a follow waits before starting again after an
// error (the server restarting, the connection lost): the runner's wait,
// not doubled.
const retryAfter = 2 * time.Second

// runLive follows the streams and the informers until ctx ends.
func (v *View) runLive(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := v.o.Now()
	since := start.Add(-TrendHours * time.Hour)
	var wg sync.WaitGroup
	// One follow per subject family (no catch-up: the trend counts from
	// since, the change feed from start), each through one consumer.
	reads := &runner.Runner{Name: "dashboard follow", Reader: v.streams, Log: v.o.Logger, RetryMin: retryAfter, RetryMax: retryAfter}
	var handlers []func(events.Record)
	follow := func(filters []string, from events.Start, handle func(events.Record)) {
		reads.Sources = append(reads.Sources, runner.Source{Filters: filters, From: from, FollowOnly: true})
		handlers = append(handlers, handle)
	}
	follow(filterHeartbeats, events.FromTime(since), func(rec events.Record) {
		if _, err := events.Decode[events.DeviceHeartbeat](rec.Event); err != nil {
			v.o.Skips.Skip(ctx, v.o.Logger, events.InvalidData(rec, err))
			return
		}
		v.trend.heartbeat(rec.Stored)
		v.hub.publish(pagesOfRecord(rec)...)
	})
	v.trend.startLive(start)
	follow(filterReports, events.FromTime(since), func(rec events.Record) {
		if rec.Event.Type == events.TypeWorkloadDegraded || rec.Event.Type == events.TypeWorkloadRecovered {
			// Not in the trend (workload, task and command reports).
			if _, err := events.Decode[events.WorkloadHealth](rec.Event); err != nil {
				v.o.Skips.Skip(ctx, v.o.Logger, events.InvalidData(rec, err))
			} else if rec.Stored.After(start) {
				v.hub.publish(pagesOfRecord(rec)...)
			}
			return
		}
		failed, err := reportFailed(rec)
		if err != nil {
			v.o.Skips.Skip(ctx, v.o.Logger, events.InvalidData(rec, err))
			return
		}
		v.trend.report(rec.Stored, failed)
		if rec.Stored.After(start) {
			v.hub.publish(pagesOfRecord(rec)...)
		}
	})
	for _, filters := range [][]string{filterIntent, filterRollout, filterInventory, filterContainers, filterCommands} {
		follow(filters, events.FromTime(start), func(rec events.Record) { v.hub.publish(pagesOfRecord(rec)...) })
	}
	in := make(chan runner.Msg, 1024)
	wg.Go(func() { reads.Run(ctx, in) })
	wg.Go(func() { v.handle(ctx, in, handlers) })
	v.following.Store(true)
	defer v.following.Store(false)
	var err error
	if v.o.Informers != nil {
		err = v.watchInformers(ctx, &wg)
	}
	if err == nil {
		<-ctx.Done()
	}
	cancel()
	wg.Wait()
	return err
}

// handle hands every decoded record the follows read to its source's
// handler, until ctx ends. Undecodable records are skipped and counted.
func (v *View) handle(ctx context.Context, in <-chan runner.Msg, handlers []func(events.Record)) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			switch {
			case m.Skip != nil:
				v.o.Skips.Skip(ctx, v.o.Logger, m.Skip)
			case m.Caught, m.Err != nil:
			default:
				handlers[m.Source](m.Record)
			}
		}
	}
}

// watchInformers registers handlers on the Device, Deployment and TaskRun
// informers that publish the pages an object's change affects, and removes
// them when ctx ends.
func (v *View) watchInformers(ctx context.Context, wg *sync.WaitGroup) error {
	kinds := []struct {
		obj   client.Object
		pages func(client.Object) []PageRef
	}{
		{&fleetv1.Device{}, func(o client.Object) []PageRef {
			return []PageRef{{Kind: PageDevice, Key: o.GetName()}, {Kind: PageDevices}, {Kind: PageOverview}, {Kind: PageAlerts}}
		}},
		{&fleetv1.Deployment{}, func(o client.Object) []PageRef {
			return []PageRef{{Kind: PageDeployment, Key: o.GetNamespace() + "/" + o.GetName()}, {Kind: PageDeployments}, {Kind: PageOverview}, {Kind: PageAlerts}}
		}},
		{&fleetv1.TaskRun{}, func(o client.Object) []PageRef {
			return []PageRef{{Kind: PageTaskRun, Key: o.GetNamespace() + "/" + o.GetName()}, {Kind: PageTaskRuns}, {Kind: PageOverview}, {Kind: PageAlerts}}
		}},
	}
	var errs []error
	for _, k := range kinds {
		// Not waiting for the sync: the handler sees the objects as they
		// come, and a Run ended early is not an error.
		inf, err := v.o.Informers.GetInformer(ctx, k.obj, cache.BlockUntilSynced(false))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			errs = append(errs, fmt.Errorf("informer of %T: %w", k.obj, err))
			continue
		}
		pages := k.pages
		handle := func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(client.Object); ok {
				v.hub.publish(pages(o)...)
			}
		}
		reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: handle, UpdateFunc: func(_, n any) { handle(n) }, DeleteFunc: handle})
		if err != nil {
			errs = append(errs, fmt.Errorf("handler on the informer of %T: %w", k.obj, err))
			continue
		}
		wg.Go(func() {
			<-ctx.Done()
			if err := inf.RemoveEventHandler(reg); err != nil {
				v.o.Logger.Debug("removing an informer handler", "err", err)
			}
		})
	}
	return errors.Join(errs...)
}
