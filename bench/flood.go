package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
)

// FloodResult is what the rollout under a flood measured (Options.Flooders):
// a revision rolled out to the same devices as the size's first rollout,
// while the flooding devices published as fast as they could on their own
// report subjects.
type FloodResult struct {
	// Flooders is the number of flooding devices; WorkloadOnly is
	// Options.FloodWorkloadOnly.
	Flooders     int
	WorkloadOnly bool
	// Projected, Converged and Succeeded are Result's figures of the
	// rollout under the flood.
	Projected, Converged, Succeeded time.Duration
	// Duration is how long the flooders published: from just before the
	// revision's append until the runner had appended rollout.succeeded.
	Duration time.Duration
	// ByKind is the flooders' traffic per report kind (heartbeat,
	// inventory, workload, task, command, health, containers, fetch).
	ByKind map[string]FloodTraffic
	// PublishErrors counts publishes the client library refused (while
	// disconnected); Disconnects the flooders' connections lost.
	PublishErrors, Disconnects uint64
	// IngestedReports and IngestedTelemetry are how many messages
	// FLEET_REPORTS and FLEET_TELEMETRY took (their last sequence grew by)
	// from just before the flood until it was drained: the flood, the
	// targets' own reports and the drain sentinels. The report streams
	// never acknowledge (ADR 0006), so a flooder learns of nothing it
	// published; what the ingest queue dropped is published − ingested.
	IngestedReports, IngestedTelemetry uint64
	// InReports and InTelemetry are how many of the flooders' messages
	// FLEET_REPORTS and FLEET_TELEMETRY held once the flood was drained
	// (telemetry keeps the last few per subject).
	InReports, InTelemetry uint64
	// ReportsGrowth is how much FLEET_REPORTS grew over the rollout under
	// the flood, in stored bytes: the flood and the targets' own reports
	// (two per target, about 0.5 KB each).
	ReportsGrowth uint64
	// RunnerSkipped counts the records the rollout runner skipped as
	// undecodable (the forged reports naming targets, garbage) from the
	// flood's start until it had read past the flood.
	RunnerSkipped uint64
	// RunnerMaxBacklog is the largest number of workload reports stored but
	// not yet sent to the runner's consumer, sampled every 100 ms from the
	// flood's start until it was drained; Drain is the time from the
	// flood's end (every flooder's publishes flushed to the server) until
	// the runner had read past the flood.
	RunnerMaxBacklog uint64
	Drain            time.Duration
	// RSSBefore and PeakRSS are the control plane process's resident memory
	// before the flood and the most sampled (every 100 ms) until it was
	// drained: server, runner and callout together.
	RSSBefore, PeakRSS uint64
	// ConvergedAtSucceeded is how many targets had reported Converged on
	// their own subjects when the runner's rollout.succeeded arrived: N
	// unless the runner counted reports that were not theirs.
	ConvergedAtSucceeded int
	// RunnerMaxFailed is the largest failed count the runner showed for the
	// revision, in its transitions and in its Deployment statuses up to the
	// first status after the drain: 0 unless it counted a forged failure.
	RunnerMaxFailed int
	// RunnerMaxDegraded is the largest degraded count the runner's
	// Deployment statuses of the revision showed: 0 unless it believed a
	// Degraded report that was not a target's own about the revision it
	// holds.
	RunnerMaxDegraded int
}

// FloodTraffic is what the flooding devices published on one report kind.
type FloodTraffic struct {
	// Published and PublishedBytes count the messages sent (payload bytes).
	Published, PublishedBytes uint64
}

func (t *FloodTraffic) add(o FloodTraffic) {
	t.Published += o.Published
	t.PublishedBytes += o.PublishedBytes
}

// Total is the traffic of every kind.
func (r *FloodResult) Total() FloodTraffic {
	var t FloodTraffic
	for _, k := range r.ByKind {
		t.add(k)
	}
	return t
}

// Stream is the traffic of the kinds stored in stream (events.StreamReports
// or events.StreamTelemetry).
func (r *FloodResult) Stream(stream string) FloodTraffic {
	var t FloodTraffic
	for kind, k := range r.ByKind {
		if s, err := events.StreamOf("fleet.report.x." + kind); err == nil && s == stream {
			t.add(k)
		}
	}
	return t
}

// floodKinds are the report kinds a flooder publishes on: all of a device's.
var floodKinds = [...]events.ReportKind{events.ReportWorkload, events.ReportTask, events.ReportCommand, events.ReportHeartbeat, events.ReportInventory,
	events.ReportHealth, events.ReportContainers, events.ReportFetch}

// floodHealth and floodFetch are the indexes of events.ReportHealth and
// events.ReportFetch in floodKinds.
var (
	floodHealth = slices.Index(floodKinds[:], events.ReportHealth)
	floodFetch  = slices.Index(floodKinds[:], events.ReportFetch)
)

// floodCmd is a line the parent writes on a flood child's stdin.
type floodCmd struct {
	// Cmd is "start" (with Start) or "stop".
	Cmd   string       `json:"cmd"`
	Start *floodTarget `json:"start,omitempty"`
}

// floodTarget is what the flooders forge reports about: the revision being
// rolled out and its targets sim-1..sim-Targets. A flooder knowing it is the
// worst case (a device that is not a target never receives it).
type floodTarget struct {
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	Targets    int    `json:"targets"`
	// WorkloadOnly: small workload reports only (Options.FloodWorkloadOnly).
	WorkloadOnly bool `json:"workloadOnly,omitempty"`
}

// floodReport is a flood child's traffic, summed over its flooders.
type floodReport struct {
	Duration      time.Duration           `json:"duration"`
	ByKind        map[string]FloodTraffic `json:"byKind"`
	PublishErrors uint64                  `json:"publishErrors,omitempty"`
	Disconnects   uint64                  `json:"disconnects,omitempty"`
}

func (r *floodReport) add(o floodReport) {
	r.Duration = max(r.Duration, o.Duration)
	if r.ByKind == nil {
		r.ByKind = map[string]FloodTraffic{}
	}
	for k, t := range o.ByKind {
		sum := r.ByKind[k]
		sum.add(t)
		r.ByKind[k] = sum
	}
	r.PublishErrors += o.PublishErrors
	r.Disconnects += o.Disconnects
}

// floodMsg is one message of a flooder's plan.
type floodMsg struct {
	subject string
	data    []byte
	kind    int // index in floodKinds
}

// flooder is one flooding device in a flood child.
type flooder struct {
	name string
	nc   *nats.Conn
	// published and publishedBytes are written by the flood goroutine only.
	published, publishedBytes [len(floodKinds)]uint64
	pubErrs                   uint64
	disconnects               atomic.Uint64
	reconnected               chan struct{}
}

// flood publishes plan round and round until stop is closed: core
// publishes, as an agent reports (the report streams never answer). A
// publish the client refuses (disconnected) waits for the reconnect.
func (fl *flooder) flood(plan []floodMsg, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		p := &plan[i%len(plan)]
		if err := fl.nc.Publish(p.subject, p.data); err != nil {
			fl.pubErrs++
			select {
			case <-fl.reconnected:
			case <-stop:
				return
			}
			continue
		}
		fl.published[p.kind]++
		fl.publishedBytes[p.kind] += uint64(len(p.data))
	}
}

// report returns the flooder's traffic.
func (fl *flooder) report() floodReport {
	r := floodReport{ByKind: map[string]FloodTraffic{}, PublishErrors: fl.pubErrs, Disconnects: fl.disconnects.Load()}
	for k, kind := range floodKinds {
		r.ByKind[string(kind)] = FloodTraffic{Published: fl.published[k], PublishedBytes: fl.publishedBytes[k]}
	}
	return r
}

// runFlooders connects flooding devices f.from..f.to (FlooderName) through
// the callout with their key files, reports ready, floods from the start
// command to the stop command, flushes (the server has read every publish
// then), writes a "flooded" line and runs until ctx ends.
func runFlooders(ctx context.Context, f childFlags, cmds <-chan floodCmd, emit func(childMsg), log *slog.Logger) error {
	hc := &http.Client{Timeout: 30 * time.Second}
	var r ramp
	n := f.to - f.from + 1
	r.connected.Add(n)
	flooders := make([]*flooder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			fl := &flooder{name: FlooderName(f.from + i), reconnected: make(chan struct{}, 1)}
			nc, took, err := connectDevice(ctx, f, fl.name, hc, &r, log,
				nats.DisconnectErrHandler(func(*nats.Conn, error) { fl.disconnects.Add(1) }),
				nats.ReconnectHandler(func(*nats.Conn) {
					select {
					case fl.reconnected <- struct{}{}:
					default:
					}
				}))
			if nc == nil {
				if err != nil && ctx.Err() == nil {
					emit(childMsg{Kind: "error", Error: fmt.Sprintf("%s: %v", fl.name, err)})
				}
				return
			}
			fl.nc = nc
			flooders[i] = fl
			r.done(took)
		})
	}
	defer func() {
		for _, fl := range flooders {
			if fl != nil && fl.nc != nil {
				fl.nc.Close()
			}
		}
	}()
	r.report(ctx, emit)
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	var target floodTarget
	select {
	case c := <-cmds:
		if c.Cmd != "start" || c.Start == nil {
			return fmt.Errorf("scalebench flood: want a start line, got %q", c.Cmd)
		}
		target = *c.Start
	case <-ctx.Done():
		return nil
	}
	plans := make([][]floodMsg, n)
	for i, fl := range flooders {
		if fl == nil {
			return fmt.Errorf("scalebench flood: %s is not connected", FlooderName(f.from+i))
		}
		p, err := floodPlan(fl.name, target)
		if err != nil {
			return err
		}
		plans[i] = p
	}
	stop := make(chan struct{})
	began := time.Now()
	var flooding sync.WaitGroup
	for i, fl := range flooders {
		flooding.Go(func() { fl.flood(plans[i], stop) })
	}
	emit(childMsg{Kind: "flooding"})
	select {
	case <-cmds: // stop
	case <-ctx.Done():
	}
	close(stop)
	flooding.Wait()
	var rep floodReport
	published := time.Since(began)
	for _, fl := range flooders {
		if err := fl.nc.FlushTimeout(30 * time.Second); err != nil {
			log.Warn("flush a flooder's publishes", "flooder", fl.name, "error", err)
		}
		rep.add(fl.report())
	}
	rep.Duration = published // the publishing time, the flush excluded
	emit(childMsg{Kind: "flooded", Flood: &rep})
	<-ctx.Done()
	return nil
}

// floodPlan is what flooder self publishes, round and round, for each
// target in turn: on its workload subject, a Converged and a Failed report
// of the revision naming the target (its subject is self's: the reader
// must refuse them), a Failed report of its own (a device that is not a
// target: the runner drops it), garbage, and a Failed report naming a
// target padded to DeviceMaxPayload bytes; on each of its other report
// subjects, garbage and garbage of DeviceMaxPayload bytes; on its health
// subject also a Degraded report of the revision naming the target (the
// reader must refuse it) and one of its own (it does not hold the
// revision: the runner drops it); on its fetch subject likewise a Fetched
// report of the revision naming the target and one of its own (neither
// may count the device in status.prefetched). With t.WorkloadOnly, only the small
// workload messages. Every forged report is
// dated an hour ahead, so that counted for a target it would win over the
// target's own.
func floodPlan(self string, t floodTarget) ([]floodMsg, error) {
	subjects := make([]string, len(floodKinds))
	for k, kind := range floodKinds {
		s, err := events.ReportSubject(self, kind)
		if err != nil {
			return nil, fmt.Errorf("scalebench flood: %w", err)
		}
		subjects[k] = s
	}
	since := time.Now().Add(time.Hour).UTC()
	forge := func(dev string, phase events.WorkloadPhase, pad int) ([]byte, error) {
		ws := events.WorkloadStatus{Namespace: t.Namespace, Deployment: t.Deployment, UID: t.UID, Generation: t.Generation,
			RevisionID: t.RevisionID, Phase: phase, Since: since}
		if phase == events.WorkloadFailed {
			ws.Error = "forged by " + self
		}
		ev, err := events.New(events.Keys{Device: dev}, ws, events.WithCorrelation(t.UID, t.Generation))
		if err != nil {
			return nil, fmt.Errorf("scalebench flood: forge a report: %w", err)
		}
		b, err := ev.Marshal()
		if err != nil || pad == 0 {
			return b, err
		}
		// Pad the error text so that the envelope is exactly pad bytes
		// (the envelope's own fields keep their length).
		if len(b) > pad {
			return nil, fmt.Errorf("scalebench flood: a report of %d bytes does not fit in %d", len(b), pad)
		}
		ws.Error += strings.Repeat("x", pad-len(b))
		if ev.Data, err = json.Marshal(ws); err != nil {
			return nil, fmt.Errorf("scalebench flood: %w", err)
		}
		if b, err = ev.Marshal(); err == nil && len(b) != pad {
			err = fmt.Errorf("scalebench flood: a padded report of %d bytes, want %d", len(b), pad)
		}
		return b, err
	}
	garbage := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rand.N(256))
		}
		return b
	}
	degraded := func(dev string) ([]byte, error) {
		d := events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: t.Namespace, Deployment: t.Deployment,
			UID: t.UID, Generation: t.Generation, RevisionID: t.RevisionID, Reason: events.HealthCrashLoop, Window: 300,
			Services: []events.ServiceHealth{{Name: "forged", State: "exited", Restarts: 3, ExitCode: 2}}, Since: since})
		ev, err := events.New(events.Keys{Device: dev}, d, events.WithCorrelation(t.UID, t.Generation))
		if err != nil {
			return nil, fmt.Errorf("scalebench flood: forge a health report: %w", err)
		}
		return ev.Marshal()
	}
	fetched := func(dev string) ([]byte, error) {
		ended := since
		f := events.WorkloadFetch{Namespace: t.Namespace, Deployment: t.Deployment, UID: t.UID, Generation: t.Generation,
			RevisionID: t.RevisionID, Phase: events.FetchDone, Images: 1, Pulled: 1, Started: since, Ended: &ended}
		ev, err := events.New(events.Keys{Device: dev}, f, events.WithCorrelation(t.UID, t.Generation))
		if err != nil {
			return nil, fmt.Errorf("scalebench flood: forge a fetch report: %w", err)
		}
		return ev.Marshal()
	}
	small, big := garbage(512), garbage(authcallout.DeviceMaxPayload)
	own, err := forge(self, events.WorkloadFailed, 0)
	if err != nil {
		return nil, err
	}
	ownDegraded, err := degraded(self)
	if err != nil {
		return nil, err
	}
	ownFetched, err := fetched(self)
	if err != nil {
		return nil, err
	}
	var bigForged [][]byte
	for i := range min(8, t.Targets) {
		b, err := forge(DeviceName(i+1), events.WorkloadFailed, authcallout.DeviceMaxPayload)
		if err != nil {
			return nil, err
		}
		bigForged = append(bigForged, b)
	}
	msg := func(k int, data []byte) floodMsg {
		return floodMsg{subject: subjects[k], data: data, kind: k}
	}
	var plan []floodMsg
	for i := range max(1, t.Targets) {
		dev := DeviceName(i + 1)
		conv, err := forge(dev, events.WorkloadConverged, 0)
		if err != nil {
			return nil, err
		}
		failed, err := forge(dev, events.WorkloadFailed, 0)
		if err != nil {
			return nil, err
		}
		plan = append(plan, msg(0, conv), msg(0, failed), msg(0, own), msg(0, small))
		if t.WorkloadOnly {
			continue
		}
		forgedDegraded, err := degraded(dev)
		if err != nil {
			return nil, err
		}
		forgedFetched, err := fetched(dev)
		if err != nil {
			return nil, err
		}
		plan = append(plan, msg(0, bigForged[i%len(bigForged)]), msg(floodHealth, forgedDegraded), msg(floodHealth, ownDegraded),
			msg(floodFetch, forgedFetched), msg(floodFetch, ownFetched))
		for k := 1; k < len(floodKinds); k++ {
			plan = append(plan, msg(k, small), msg(k, big))
		}
	}
	return plan, nil
}

// floodRun is the flood children of one rollout under a flood, seen from
// the parent.
type floodRun struct {
	children []*child
}

// send writes one command line to every flood child.
func (r *floodRun) send(c floodCmd) error {
	line, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	line = append(line, '\n')
	for _, ch := range r.children {
		if _, err := ch.stdin.Write(line); err != nil {
			return fmt.Errorf("%w: flood %s: %w", ErrChild, c.Cmd, err)
		}
	}
	return nil
}

// start makes the flooders start and waits until every flood child is
// publishing.
func (r *floodRun) start(ctx context.Context, t floodTarget, timeout time.Duration) error {
	if err := r.send(floodCmd{Cmd: "start", Start: &t}); err != nil {
		return err
	}
	return r.await(ctx, "flooding", timeout, func(childMsg) {})
}

// await waits for a line of kind from every flood child and passes each to
// fn.
func (r *floodRun) await(ctx context.Context, kind string, timeout time.Duration, fn func(childMsg)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for _, c := range r.children {
		for got := false; !got; {
			select {
			case m, ok := <-c.msgs:
				switch {
				case !ok:
					return fmt.Errorf("%w: flood child pid %d exited before its %q line", ErrChild, c.cmd.Process.Pid, kind)
				case m.Kind == "error":
					return fmt.Errorf("%w: %s", ErrChild, m.Error)
				case m.Kind == kind:
					fn(m)
					got = true
				}
			case <-deadline.C:
				return fmt.Errorf("%w: no %q line from the flood children after %s", ErrIncomplete, kind, timeout)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// stop makes the flooders stop and returns their traffic once every
// flooder flushed its publishes.
func (r *floodRun) stop(ctx context.Context, timeout time.Duration) (floodReport, error) {
	var sum floodReport
	if err := r.send(floodCmd{Cmd: "stop"}); err != nil {
		return sum, err
	}
	err := r.await(ctx, "flooded", timeout, func(m childMsg) {
		if m.Flood != nil {
			sum.add(*m.Flood)
		}
	})
	return sum, err
}

// runnerFilter is the filter of the rollout runner's consumer of workload
// reports.
const runnerFilter = "fleet.report.*.workload"

// streamFigures returns the state of a stream of the control plane's account
// and the largest number of messages pending for its consumers filtered on
// filter ("": none).
func streamFigures(s *server.Server, stream, filter string) (server.StreamState, uint64, error) {
	info, err := s.Jsz(&server.JSzOptions{Account: authcallout.AccountFleet, Accounts: true, Streams: true, Consumer: filter != "", Config: filter != ""})
	if err != nil {
		return server.StreamState{}, 0, fmt.Errorf("scalebench: %w", err)
	}
	for _, a := range info.AccountDetails {
		for _, sd := range a.Streams {
			if sd.Name != stream {
				continue
			}
			var pending uint64
			for _, ci := range sd.Consumer {
				if ci.Config != nil && (ci.Config.FilterSubject == filter || (len(ci.Config.FilterSubjects) == 1 && ci.Config.FilterSubjects[0] == filter)) {
					pending = max(pending, ci.NumPending)
				}
			}
			return sd.State, pending, nil
		}
	}
	return server.StreamState{}, 0, fmt.Errorf("scalebench: stream %s not found", stream)
}

// flooded rolls out the next revision to devices 1..n while the flooders
// flood, and measures what the flood took and whether the runner counted
// any of it for a target.
func (b *bench) flooded(ctx context.Context, n int, res *Result) (*FloodResult, error) {
	o, cp := b.o, b.cp
	fr := &FloodResult{Flooders: o.Flooders, WorkloadOnly: o.FloodWorkloadOnly}
	before, _, err := streamFigures(cp.plane.Server().NATS(), events.StreamReports, "")
	if err != nil {
		return fr, err
	}
	telBefore, _, err := streamFigures(cp.plane.Server().NATS(), events.StreamTelemetry, "")
	if err != nil {
		return fr, err
	}
	skipped := cp.runnerSkips.Skipped(events.StreamReports, "")
	cs, err := b.children(modeFlood, o.Flooders, 0)
	if err != nil {
		return fr, err
	}
	defer stopChildren(cs)
	if _, err := awaitReady(ctx, cs, o.Timeout); err != nil {
		return fr, err
	}
	o.Logger.Info("flooding devices connected", "flooders", o.Flooders)

	// The runner's backlog and this process's memory, sampled until the
	// flood is drained.
	var backlog, rss atomic.Uint64
	fr.RSSBefore = processRSS()
	sampling, stopSampling := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopSampling()
	raise := func(v *atomic.Uint64, to uint64) {
		for seen := v.Load(); to > seen && !v.CompareAndSwap(seen, to); seen = v.Load() {
		}
	}
	sample := func() {
		if _, p, err := streamFigures(cp.plane.Server().NATS(), events.StreamReports, runnerFilter); err == nil {
			raise(&backlog, p)
		}
		raise(&rss, processRSS())
	}
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				sample()
			case <-sampling.Done():
				return
			}
		}
	})

	run := &floodRun{children: cs}
	fig, rerr := b.rollout(ctx, n, res, run)
	fr.Projected, fr.Converged, fr.Succeeded = fig.projected, fig.converged, fig.succeeded
	fr.ConvergedAtSucceeded = fig.convergedAtSucceeded
	rep, serr := run.stop(ctx, o.Timeout)
	if err := errors.Join(rerr, serr); err != nil {
		return fr, err
	}
	flushed := time.Now()
	fr.Duration, fr.ByKind = rep.Duration, rep.ByKind
	fr.PublishErrors, fr.Disconnects = rep.PublishErrors, rep.Disconnects

	// Drain: until the runner has read past the flood. The reports stream
	// keeps only the last ReportsPerSubject records of each device and
	// kind, so the runner never reads (nor skips) the flood's records the
	// stream discarded first; a sentinel stored after the flood on each
	// flooder's workload subject, of a type no flooder sends (an unknown
	// type), is read in stream order after every record the runner still
	// had to read. The flooders flushed, so the server has taken their
	// publishes before the sentinels; the sentinels are core publishes
	// (the stream never acknowledges) confirmed by the skips they cause.
	unknownBefore := cp.runnerSkips.Skipped(events.StreamReports, events.ReasonUnknownType)
	for i := 1; i <= o.Flooders; i++ {
		subj, err := events.ReportSubject(FlooderName(i), events.ReportWorkload)
		if err != nil {
			return fr, err
		}
		if err := cp.monitor.Publish(subj, []byte(`{"type":"bench.drain-sentinel"}`)); err != nil {
			return fr, fmt.Errorf("scalebench: the drain sentinel on %s: %w", subj, err)
		}
	}
	// FlushWithContext needs a deadline; the command's context has none.
	flushCtx, cancelFlush := context.WithTimeout(ctx, o.Timeout)
	err = cp.monitor.FlushWithContext(flushCtx)
	cancelFlush()
	if err != nil {
		return fr, fmt.Errorf("scalebench: the drain sentinels: %w", err)
	}
	deadline := time.Now().Add(o.Timeout)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for cp.runnerSkips.Skipped(events.StreamReports, events.ReasonUnknownType)-unknownBefore < uint64(o.Flooders) {
		if time.Now().After(deadline) {
			return fr, fmt.Errorf("%w: the runner did not read past the flood in the %s after it (skipped %d of the flood's records so far)",
				ErrIncomplete, o.Timeout, cp.runnerSkips.Skipped(events.StreamReports, "")-skipped)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fr, ctx.Err()
		}
	}
	drained := time.Now()
	fr.Drain = drained.Sub(flushed)
	stopSampling()
	wg.Wait()
	fr.RunnerMaxBacklog, fr.PeakRSS = backlog.Load(), rss.Load()

	// Everything the runner folded is in its next status, at most a status
	// interval later (none comes when it folded nothing new).
	cp.status.awaitAfter(ctx, drained, 2*runnerStatusInterval+time.Second)
	st := cp.status.figures(fig.generation)
	fr.RunnerMaxFailed = max(fig.maxFailed, st.MaxFailed)
	fr.RunnerMaxDegraded = st.MaxDegraded
	fr.RunnerSkipped = cp.runnerSkips.Skipped(events.StreamReports, "") - skipped
	after, _, err := streamFigures(cp.plane.Server().NATS(), events.StreamReports, "")
	if err != nil {
		return fr, err
	}
	fr.ReportsGrowth = after.Bytes - before.Bytes
	fr.IngestedReports = after.LastSeq - before.LastSeq
	telAfter, _, err := streamFigures(cp.plane.Server().NATS(), events.StreamTelemetry, "")
	if err != nil {
		return fr, err
	}
	fr.IngestedTelemetry = telAfter.LastSeq - telBefore.LastSeq
	for i := 1; i <= o.Flooders; i++ {
		filter := "fleet.report." + FlooderName(i) + ".>"
		for stream, into := range map[string]*uint64{events.StreamReports: &fr.InReports, events.StreamTelemetry: &fr.InTelemetry} {
			s, err := cp.monitorJS.Stream(ctx, stream)
			if err != nil {
				return fr, fmt.Errorf("scalebench: %w", err)
			}
			info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				return fr, fmt.Errorf("scalebench: %s: %w", stream, err)
			}
			for _, c := range info.State.Subjects {
				*into += c
			}
		}
	}
	switch {
	case st.MaxFailed > 0 || st.Failure != nil:
		return fr, fmt.Errorf("%w: the runner's status of the revision showed %d failed targets (latest failure %v) though none reported Failed on its own subject",
			ErrMiscounted, st.MaxFailed, st.Failure != nil)
	case st.MaxDegraded > 0:
		return fr, fmt.Errorf("%w: the runner's status of the revision showed %d degraded targets though none reported Degraded on its own subject",
			ErrMiscounted, st.MaxDegraded)
	case st.Applies > 0 && st.Last.Counts.Succeeded != int32(n):
		return fr, fmt.Errorf("%w: the runner's last status of the revision showed %d of %d targets succeeded after the flood",
			ErrMiscounted, st.Last.Counts.Succeeded, n)
	}
	return fr, stopChildren(cs)
}
