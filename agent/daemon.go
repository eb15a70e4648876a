package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/imagesig"
)

// Commands the agent knows on its command subject.
const (
	CommandReconcileNow    = "reconcile-now"
	CommandReportInventory = "report-inventory"
)

// Options configure the agent daemon.
type Options struct {
	// Device is this device's id.
	Device string
	// Conn is the NATS connection (device credential, custom inbox prefix
	// _INBOX_<device>); the caller owns it.
	Conn *nats.Conn
	// Reconciler applies desired state to the runtime.
	Reconciler *Reconciler
	// Labels are self-reported placement labels sent with the inventory.
	Labels map[string]string
	// AgentVersion is reported in heartbeats and inventory.
	AgentVersion string
	// HeartbeatInterval is how often the agent sends a heartbeat besides
	// the one it sends on every connect (ADR 0032: a connection is
	// liveness, the heartbeat carries the agent's version and uptime).
	// Zero: DefaultHeartbeatInterval; negative: on connect only.
	HeartbeatInterval time.Duration
	// ResyncInterval re-reads the intent and reconciles even without a
	// change notification (repairs drift) once nothing told the agent its
	// stored value for that long: a direct get, or a notification of the
	// value as stored, restarts it (ADR 0034). Default 5 minutes.
	ResyncInterval time.Duration
	// RereportInterval is how often the agent publishes again, byte for
	// byte (same event id, so the same Nats-Msg-Id), every workload, task
	// and command report it published less than EchoWindow ago. Reports
	// are never acknowledged (ADR 0006), and one published while a
	// cluster's reports stream elects a new leader is lost though the
	// connection never dropped; the stream stores an echo only when the
	// original was lost (deduplication within its duplicate window), so
	// history does not grow. Default 30s.
	RereportInterval time.Duration
	// EchoWindow is how long a report is echoed: shorter than the report
	// streams' duplicate window (events.DefaultDuplicateWindow, 2 minutes),
	// or an echo of a stored report could be stored again. Default 90s.
	EchoWindow time.Duration
	Logger     *slog.Logger
	// Skips counts the commands the agent skips because they do not decode
	// (stream FLEET_COMMANDS). Nil-safe.
	Skips *events.SkipCounter
	// Updater is the root updater the intent's tasks run through; nil:
	// every task fails with ErrNoUpdater.
	Updater Updater
	// TaskPoll is how often a running task is asked about, and a task
	// waiting for its maintenance window looked at again (default
	// DefaultTaskPoll).
	TaskPoll time.Duration
	// Now is the device's clock, in its local time zone, on which
	// maintenance windows are read. Default time.Now.
	Now func() time.Time
	// Metrics, when set, record passes, intent reads, the offline report
	// buffer and the connection's state; the Reconciler records to them too
	// when it has no Metrics of its own. Nil: nothing recorded.
	Metrics *Metrics
	// EventStamp, when set, is applied last to every report the agent
	// builds: tests that pin the bytes of reports set their id and time
	// with it (events.WithID, events.WithTime), and Now their since. Nil,
	// always in production: a new ULID and the current time.
	EventStamp events.Option
	// StateDir holds the monitor's state file (health.json, a cache of
	// which Deployments are Degraded); "" keeps none, and an agent restart
	// then decides from the engine (ADR 0019).
	StateDir string
	// DegradedRestarts deaths of a service within DegradedWindow make its
	// Deployment Degraded (CrashLoop); 0 means DefaultDegradedRestarts and
	// DefaultDegradedWindow.
	DegradedRestarts int
	DegradedWindow   time.Duration
	// WatchPoll is how often the monitor lists the containers while the
	// engine's events flow (DefaultWatchPoll when 0); without events it
	// lists them every 10 s.
	WatchPoll time.Duration
	// HealthTick is how often the monitor applies its rules
	// (DefaultHealthTick when 0). Its times are read on Now.
	HealthTick time.Duration
	// NoContainerReports turns the device.containers snapshots off
	// (--report-containers=false).
	NoContainerReports bool
	// FetchConcurrency is how many images the agent pulls at once when it
	// fetches a revision ahead of its release (spec.rollout.prefetch, ADR
	// 0027); 0 means DefaultFetchConcurrency. At most MaxFetchConcurrency.
	FetchConcurrency int

	// stepHook, set by tests only, is called after each step of the
	// monitor with the time it decided at.
	stepHook func(now time.Time)
	// rebaseAfter, set by tests only, replaces defaultRebaseAfter.
	rebaseAfter time.Duration
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if err := events.ValidateToken(events.TokenDevice, o.Device); err != nil {
		errs = append(errs, fmt.Errorf("agent: device id: %w", err))
	}
	if o.Conn == nil {
		errs = append(errs, errors.New("agent: no NATS connection"))
	}
	if o.Reconciler == nil || o.Reconciler.Runtime == nil {
		errs = append(errs, errors.New("agent: no container runtime"))
	}
	if o.FetchConcurrency < 0 || o.FetchConcurrency > MaxFetchConcurrency {
		errs = append(errs, fmt.Errorf("agent: FetchConcurrency %d: give 1 to %d, or 0 for %d", o.FetchConcurrency, MaxFetchConcurrency, DefaultFetchConcurrency))
	}
	return errors.Join(errs...)
}

// daemon is one running agent.
type daemon struct {
	o Options
	// logs are the logs requests being answered (ADR 0025).
	logs *logStreams
	// passes are the last passes, for a diagnosis (guarded by mu).
	passes  []events.PassRecord
	log     *slog.Logger
	started time.Time

	mu       sync.Mutex // guards the fields below
	lastSeq  uint64
	reported map[[2]string]events.WorkloadStatus
	// offline holds reports made while disconnected, coalesced: one per
	// key (the last heartbeat, the last inventory, the last status of each
	// Deployment; command results each), at most MaxOfflineReports.
	offline map[string]*nats.Msg
	// sent are the workload, task and command reports published less
	// than EchoWindow ago, oldest first, at most maxEchoes (echo).
	sent        []sentReport
	offlineKeys []string // insertion order
	// notified is the value of the latest change notification not yet seen
	// by a direct get (nil: none pending); stored is the latest notified
	// value that is this device's intent as JetStream stored it (nil:
	// none), which a pass runs without reading it again.
	notified []byte
	stored   *storedValue
	// rebase: the agent connected to a server it was never connected to
	// and has not read a value at or above lastSeq there yet; lowerSince
	// is when it first read a lower one there, rebaseWake the pass it
	// woke for then (rebase.go).
	rebase     bool
	lowerSince time.Time
	rebaseWake *time.Timer
	// toldAt is when the agent last learned its stored value: a direct
	// get that answered, or a notification of the value as stored. The
	// resync reads again ResyncInterval after it (resyncDue).
	toldAt time.Time
	// poke wakes the loop for a pass; retry is the pending retry of a pass
	// that found the engine or the secret source unavailable, backoff its
	// delay.
	poke    func()
	retry   *time.Timer
	backoff time.Duration
	// newer is set when a change notification arrives: a running pass
	// whose intent is older is cancelled (see Run).
	newer bool
	// passSeq is the intent sequence the running pass applies, once it
	// has read it (passRead).
	passSeq  uint64
	passRead bool
	// restored: Restore ran, or an intent was read (it is not needed).
	restored bool
	// tasks runs the intent's tasks (see tasks.go).
	tasks *taskRunner
	// fetch pulls the images of revisions not handed to the device yet
	// (prefetch.go).
	fetch *fetcher
	// mon watches what the passes started (watch.go); unstable holds the
	// revisions with minReady that failed to settle, sticky until a new
	// revision (stability.go).
	mon      *monitor
	unstable map[depKey]unstableRev
	// windows are the maintenance windows switches and fetches wait for
	// (window.go).
	windows windowWatch
	// marks are the reports a reconnect may send again, by offlineKey,
	// and whether each settled (settle.go); inventorySent is the last
	// inventory sent, encoded.
	marks         map[string]*settleMark
	inventorySent []byte
	// servers are the ids of the servers the agent was connected to,
	// oldest first, at most maxServers (connectedTo).
	servers []string
}

// Retry delays after the engine (or the secret source) was found
// unavailable: doubling from the first to the last.
const (
	firstEngineRetry = time.Second
	lastEngineRetry  = time.Minute
)

// deletedValue stands for a delete or purge notification.
var deletedValue = []byte{}

// storedValue is a device's intent value as the bucket stored it at seq.
type storedValue struct {
	intent events.DeviceIntent
	seq    uint64
}

// storedIntent returns the value a notification carries when it is this
// device's intent as JetStream stored it: the bucket republishes each value
// after storing it, with the stream's headers, so a notification whose
// Nats-Subject is the device's key, with a sequence, no KV operation (a
// delete or purge) and a value that decodes as the device's intent is the
// stored value itself. Anything else is only a hint (notifiedValue).
func storedIntent(m *nats.Msg, device string) (storedValue, bool) {
	kv, err := events.IntentKVSubject(device)
	if err != nil || m.Header == nil || m.Header.Get("Nats-Subject") != kv || m.Header.Get("KV-Operation") != "" || m.Header.Get("Status") != "" {
		return storedValue{}, false
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil || seq == 0 {
		return storedValue{}, false
	}
	v, err := decodeIntent(m.Data, device)
	if err != nil {
		return storedValue{}, false
	}
	return storedValue{intent: v, seq: seq}, true
}

func notifiedValue(m *nats.Msg) []byte {
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return deletedValue
	}
	return append([]byte(nil), m.Data...)
}

// MaxOfflineReports bounds the reports kept while the agent is
// disconnected; past it the oldest are dropped (current state is re-reported
// after every reconnect anyway).
const MaxOfflineReports = 1024

// DefaultHeartbeatInterval is how often an agent heartbeats besides on
// every connect when Options.HeartbeatInterval is zero: liveness is the
// connection (ADR 0032), the heartbeat only refreshes the agent's version
// and uptime.
const DefaultHeartbeatInterval = 30 * time.Minute

// Run reads this device's intent and keeps Podman converged on it until ctx
// ends: a core subscription to its fleet-intent key's subject triggers a
// subject-scoped direct get (never a JetStream consumer), and every
// reconnect re-reads it. It reports workload status per revision, a
// heartbeat every interval and the inventory, and answers agent commands.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.RereportInterval == 0 {
		o.RereportInterval = DefaultRereportInterval
	}
	if o.EchoWindow == 0 {
		o.EchoWindow = DefaultEchoWindow
	}
	if o.ResyncInterval == 0 {
		o.ResyncInterval = 5 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Reconciler.Device == "" {
		o.Reconciler.Device = o.Device
	}
	if o.Reconciler.Device != o.Device {
		return fmt.Errorf("agent: the reconciler acts for device %q, the agent is %q", o.Reconciler.Device, o.Device)
	}
	if o.Reconciler.Metrics == nil {
		o.Reconciler.Metrics = o.Metrics
	}
	if o.Reconciler.Pins == nil {
		o.Reconciler.Pins = &SecretPins{}
	}
	if o.Reconciler.PullBackoff == nil {
		o.Reconciler.PullBackoff = &PullBackoff{}
	}
	if o.Reconciler.Verifier == nil {
		v, err := imagesig.NewVerifier()
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		o.Reconciler.Verifier = v
		defer func() {
			o.Reconciler.Verifier = nil // the next Run makes its own
			_ = v.Close()
		}()
	}
	o.Metrics.attach(o.Conn)
	defer o.Metrics.detach(o.Conn)
	d := &daemon{o: o, log: o.Logger.With("device", o.Device), started: time.Now(), reported: map[[2]string]events.WorkloadStatus{}}
	defer d.stopRetry()
	d.tasks = newTaskRunner(d)
	d.unstable = map[depKey]unstableRev{}
	d.mon = newMonitor(d)
	tctx, stopTasks := context.WithCancel(ctx)
	var tasksDone sync.WaitGroup
	defer func() {
		stopTasks()
		tasksDone.Wait()
		// The log streams end with tctx; waiting here keeps no goroutine
		// per device for it while the agent runs.
		if d.logs != nil {
			d.logs.wg.Wait()
		}
	}()
	tasksDone.Go(func() { d.tasks.run(tctx) })
	d.fetch = newFetcher(d)
	tasksDone.Go(func() { d.fetch.run(tctx) })
	d.mon.start(tctx) // before the first pass starts a container
	d.logs = newLogStreams(d, tctx)

	notifySubj, _ := events.IntentNotifySubject(o.Device)
	cmdSubj, _ := events.CommandSubject(o.Device)
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	d.poke = poke
	tasksDone.Go(func() { d.mon.run(tctx) })
	tasksDone.Go(func() { d.windows.run(tctx, d.tasks.poll, d.clock, poke) })
	// A change notification arrives on the core subscription, republished
	// by the bucket once stored: the device's own value as stored is run
	// as it is; anything else is only a hint that triggers a direct get,
	// and a value that is not this device's intent is never waited for
	// (readIntent checks it only when the store differs).
	kvSub, err := o.Conn.Subscribe(notifySubj, func(m *nats.Msg) {
		sv, ok := storedIntent(m, o.Device)
		var v []byte
		if !ok {
			v = notifiedValue(m)
		}
		d.mu.Lock()
		switch {
		case !ok:
			d.notified = v
			d.newer = true
		case d.stored == nil || sv.seq > d.stored.seq:
			d.stored = &sv
			d.newer = d.newer || sv.seq > d.passSeq
			d.toldAt = time.Now()
		}
		d.mu.Unlock()
		poke()
	})
	if err != nil {
		return fmt.Errorf("agent: subscribe %s: %w", notifySubj, err)
	}
	defer func() { _ = kvSub.Unsubscribe() }()
	// Commands wait here while a pass runs (a pull, a 30 s stop); the
	// client drops what does not fit as a slow consumer, so the buffer
	// holds far more than an operator sends to one device at once.
	cmds := make(chan *nats.Msg, 256)
	cmdSub, err := o.Conn.ChanSubscribe(cmdSubj, cmds)
	if err != nil {
		return fmt.Errorf("agent: subscribe %s: %w", cmdSubj, err)
	}
	defer func() { _ = cmdSub.Unsubscribe() }()

	// Re-read after every (re)connect, and re-report current state then.
	// The status channel also tells of the first connect of a connection
	// made while the server could not be reached (an agent booted
	// offline: nats.RetryOnFailedConnect).
	connected := o.Conn.StatusChanged(nats.CONNECTED)
	defer o.Conn.RemoveStatusListener(connected)

	d.connectedTo(o.Conn.ConnectedServerId())
	d.reportInventory(ctx, true)
	d.heartbeat(ctx)
	poke()
	// A negative interval: heartbeats on connect only.
	var beat <-chan time.Time
	if o.HeartbeatInterval > 0 {
		hb := time.NewTicker(o.HeartbeatInterval)
		defer hb.Stop()
		beat = hb.C
	}
	resync := time.NewTimer(o.ResyncInterval)
	defer resync.Stop()
	rereport := time.NewTicker(o.RereportInterval)
	defer rereport.Stop()

	// Passes run beside this loop, one at a time, so that heartbeats,
	// commands and notifications keep flowing while one waits for a pull,
	// an init container or a 30 s stop. A wake while a pass runs is
	// remembered (again) and runs right after it; a newer intent cancels
	// it (see cancelIfNewer).
	var (
		running bool
		again   bool
		cancel  context.CancelFunc
		done    = make(chan struct{}, 1)
	)
	defer func() {
		if running {
			cancel()
			<-done
		}
	}()
	start := func() {
		var pctx context.Context
		pctx, cancel = context.WithCancel(ctx)
		running, again = true, false
		d.mu.Lock()
		d.newer, d.passSeq, d.passRead = false, 0, false
		d.mu.Unlock()
		go func() {
			d.pass(pctx)
			done <- struct{}{}
		}()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-beat:
			d.heartbeat(ctx)
		case <-rereport.C:
			d.echo(ctx, time.Now())
		case <-resync.C:
			wait := d.resyncDue(time.Now())
			if wait <= 0 {
				poke()
				wait = o.ResyncInterval
			}
			resync.Reset(wait)
		case _, ok := <-connected:
			if !ok { // the listener was removed: never again
				connected = nil
				continue
			}
			// What went out since the connection broke is held and sent
			// now; of the rest only what may have been lost with the
			// connection goes again (settle.go): an idle device whose
			// reports settled long ago sends none of it, unless the
			// server is one it never was connected to.
			d.connectedTo(o.Conn.ConnectedServerId())
			d.flushOffline(ctx)
			d.rereport(ctx)
			d.mon.reconnected(ctx)
			d.reportInventory(ctx, false)
			d.heartbeat(ctx) // on every connect (ADR 0032)
			poke()
		case m := <-cmds:
			d.command(ctx, m, poke)
		case <-wake:
			if !running {
				start()
				continue
			}
			again = true
			if d.cancelIfNewer() {
				cancel()
			}
		case <-done:
			cancel()
			running = false
			if again {
				start()
			}
		}
	}
}

// cancelIfNewer reports whether a change notification newer than the
// running pass's intent arrived: the pass is then cancelled, and the next
// one starts from the newer value. A pass that has not read its intent yet
// is not cancelled (it reads the newest value anyway).
func (d *daemon) cancelIfNewer() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.newer && d.passRead
}

// readIntent returns the stored value a notification carried, when one is
// pending and no hint came with it; else it fetches the device's intent
// value by the subject-scoped direct get (at start, on a resync, after a
// reconnect, after a delete). A missing key or a delete marker is an empty
// intent. When a change
// notification is pending, it re-reads (for up to 5 s) until the stored
// value is the notified one: a core notification can arrive before
// JetStream has stored the message, and reading the older value then would
// leave the device behind until the next change. It re-reads after 1 ms,
// then twice as long each time up to 20 ms: the store usually catches up
// within a millisecond. A notified value that is not this device's intent
// (a delete is an empty value) is never waited for.
func (d *daemon) readIntent(ctx context.Context) (events.DeviceIntent, uint64, error) {
	d.mu.Lock()
	want, stored := d.notified, d.stored
	d.notified, d.stored = nil, nil
	d.mu.Unlock()
	if stored != nil && want == nil {
		return stored.intent, stored.seq, nil // the stored value itself: nothing to read
	}
	deadline := time.Now().Add(5 * time.Second)
	wait := time.Millisecond
	for checked := false; ; {
		v, seq, raw, err := d.directGet(ctx)
		if err != nil || want == nil || bytes.Equal(raw, want) || time.Now().After(deadline) {
			return v, seq, err
		}
		if !checked {
			if len(want) > 0 && !validIntent(want, d.o.Device) {
				return v, seq, err
			}
			checked = true
		}
		select {
		case <-ctx.Done():
			return v, seq, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// directGet is one subject-scoped direct get, counted; raw is the stored
// value (deletedValue for a delete marker or a missing key).
func (d *daemon) directGet(ctx context.Context) (events.DeviceIntent, uint64, []byte, error) {
	asked := time.Now()
	v, seq, raw, err := d.directGetOnce(ctx)
	if ctx.Err() == nil { // a get cut short by the agent stopping is not counted
		d.o.Metrics.intentRead(err)
	}
	if err == nil || errors.Is(err, events.ErrUndecodable) {
		// The server answered: what it stored when it was asked.
		d.mu.Lock()
		d.toldAt = asked
		d.mu.Unlock()
	}
	return v, seq, raw, err
}

// resyncDue is how long after now the resync reads the intent again:
// ResyncInterval after the agent last learned its stored value (toldAt),
// zero or less when it is due (ADR 0034). A value the agent learned at
// toldAt was the stored one then; a change after it came with a
// notification, or is read at the latest one interval after toldAt,
// which is the bound a resync every interval gave: only the reads that
// told nothing new are left out.
func (d *daemon) resyncDue(now time.Time) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.toldAt.Add(d.o.ResyncInterval).Sub(now)
}

// directGetOnce is directGet, uncounted.
func (d *daemon) directGetOnce(ctx context.Context) (events.DeviceIntent, uint64, []byte, error) {
	if !d.o.Conn.IsConnected() {
		// Not now: the next (re)connect wakes a pass that reads it.
		return events.DeviceIntent{}, 0, nil, fmt.Errorf("read intent: %w", nats.ErrDisconnected)
	}
	subj, _ := events.IntentDirectGetSubject(d.o.Device)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := d.o.Conn.RequestWithContext(rctx, subj, nil)
	if err != nil {
		return events.DeviceIntent{}, 0, nil, fmt.Errorf("read intent: %w", err)
	}
	if st := m.Header.Get("Status"); st == "404" {
		return events.DeviceIntent{Device: d.o.Device}, 0, deletedValue, nil
	} else if st != "" {
		return events.DeviceIntent{}, 0, nil, fmt.Errorf("read intent: server answered %s %s", st, m.Header.Get("Description"))
	}
	seq, _ := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return events.DeviceIntent{Device: d.o.Device}, seq, deletedValue, nil
	}
	v, err := decodeIntent(m.Data, d.o.Device)
	if err != nil {
		// Data, never control: the value is skipped (the device keeps
		// running what it runs) and read again on the next change.
		return events.DeviceIntent{}, 0, nil, fmt.Errorf("read intent: value at sequence %d (%d bytes): %w", seq, len(m.Data), err)
	}
	return v, seq, m.Data, nil
}

// decodeIntent decodes a fleet-intent value and checks it is this device's:
// its device field names the device and every entry names a valid namespace
// and Deployment. The error never quotes the value.
func decodeIntent(raw []byte, device string) (events.DeviceIntent, error) {
	var v events.DeviceIntent
	if err := json.Unmarshal(raw, &v); err != nil {
		return events.DeviceIntent{}, fmt.Errorf("%w: not a fleet-intent value", events.ErrUndecodable)
	}
	if v.Device != device {
		return events.DeviceIntent{}, fmt.Errorf("%w: the value is not this device's", events.ErrUndecodable)
	}
	for i, e := range v.Deployments {
		if events.ValidateToken(events.TokenNamespace, e.Namespace) != nil || events.ValidateToken(events.TokenName, e.Name) != nil {
			return events.DeviceIntent{}, fmt.Errorf("%w: entry %d does not name a valid namespace and Deployment", events.ErrUndecodable, i)
		}
	}
	return v, nil
}

// validIntent reports whether raw is a fleet-intent value of device.
func validIntent(raw []byte, device string) bool {
	_, err := decodeIntent(raw, device)
	return err == nil
}

// pass reads the intent and reconciles every Deployment on it; containers
// of Deployments no longer on it are removed. It is timed by its result,
// unless it skipped an older value or the agent is stopping.
func (d *daemon) pass(ctx context.Context) {
	start := time.Now()
	if result := d.reconcile(ctx); result != "" && ctx.Err() == nil {
		d.o.Metrics.pass(result, time.Since(start))
		d.recordPass(result, time.Since(start))
	}
}

// reconcile is one pass; its result is passConverged, passFailed,
// passError, or "" when it skipped an older intent value.
func (d *daemon) reconcile(ctx context.Context) string {
	intent, seq, err := d.readIntent(ctx)
	if err != nil {
		d.log.WarnContext(ctx, "intent not read; will retry on the next change or reconnect", "error", err)
		d.restoreOnce(ctx)
		return passError
	}
	d.mu.Lock()
	d.restored = true // the intent decides from now on
	d.mu.Unlock()
	d.mu.Lock()
	d.passSeq, d.passRead = seq, true
	d.newer = d.notified != nil || (d.stored != nil && d.stored.seq > seq)
	if seq < d.lastSeq && !d.rebaseLower(time.Now()) {
		d.mu.Unlock()
		return "" // an older value than one already applied
	}
	d.rebased()
	d.lastSeq = seq
	d.mu.Unlock()
	d.tasks.feed(ctx, intent.Tasks)
	d.windows.forget("deploy/")
	d.fetch.feed(intent.Fetch, intent.Deployments)
	d.o.Reconciler.Pins.Keep(intent.Deployments)
	d.o.Reconciler.PullBackoff.Keep(intent.Deployments)

	want := map[[2]string]bool{}
	unavailable, failed := false, false
	for _, e := range pullingLast(intent.Deployments, d.o.Reconciler.PullBackoff) {
		want[[2]string{e.Namespace, e.Name}] = true
		if ctx.Err() != nil {
			return "" // cancelled by a newer intent, or the agent stops
		}
		if wait, err := d.switchWait(ctx, e); err != nil {
			failed = true
			d.status(ctx, e, events.WorkloadFailed, err.Error())
			continue
		} else if wait {
			continue // reported Pending until its window opens; what runs keeps running
		}
		d.mon.untrackOther(e) // a new revision starts over
		if !d.began(e) {
			// The first pass of a revision (after any wait for its
			// window) says it is applying; a pass that repairs or
			// re-checks a revision already reported (a resync) reports
			// only a change of its outcome.
			d.status(ctx, e, events.WorkloadApplying, "")
		}
		err := d.o.Reconciler.Apply(ctx, e)
		switch {
		case ctx.Err() != nil:
			// Cancelled mid-apply: nothing is reported; the next pass
			// finishes from the containers' labels.
			return ""
		case err == nil:
			d.applied(ctx, e)
		case isUnavailable(err):
			// A component the workload needs (the secret source) is down:
			// not the workload's failure either. Checked before the engine:
			// a refused connection to OpenBao is not the engine's.
			ue, _ := AsUnavailable(err)
			unavailable = true
			d.log.WarnContext(ctx, ue.Component+" unavailable; retrying", "deployment", e.Namespace+"/"+e.Name, "error", err)
			d.status(ctx, e, events.WorkloadPending, ue.Component+" unavailable, retrying: "+unavailableText(err))
		case runtime.IsUnavailable(err):
			// Not the workload's failure: the engine is down (restarting,
			// socket gone). Say so and retry; the rollout waits.
			unavailable = true
			d.log.WarnContext(ctx, "container engine unavailable; retrying", "deployment", e.Namespace+"/"+e.Name, "error", err)
			d.status(ctx, e, events.WorkloadPending, "container engine unavailable, retrying: "+err.Error())
		default:
			failed = true
			d.log.WarnContext(ctx, "deployment not converged", "deployment", e.Namespace+"/"+e.Name, "generation", e.Generation, "error", err)
			d.status(ctx, e, events.WorkloadFailed, err.Error())
		}
	}
	if ctx.Err() != nil {
		return ""
	}
	d.mon.keep(want)
	have, err := d.o.Reconciler.Deployments(ctx)
	if runtime.IsUnavailable(err) {
		unavailable = true
	}
	d.scheduleRetry(unavailable)
	if err != nil {
		d.log.WarnContext(ctx, "list owned containers", "error", err)
		return passError
	}
	for _, k := range have {
		if want[k] {
			continue
		}
		if err := d.o.Reconciler.Remove(ctx, k[0], k[1]); err != nil {
			if ctx.Err() != nil {
				return ""
			}
			d.log.WarnContext(ctx, "remove deployment", "deployment", k[0]+"/"+k[1], "error", err)
			if runtime.IsUnavailable(err) {
				unavailable = true
			} else {
				failed = true
			}
			continue
		}
		d.mon.untrack(depKey{k[0], k[1]})
		d.mu.Lock()
		last := d.reported[k]
		d.mu.Unlock()
		d.status(ctx, events.IntentEntry{Namespace: k[0], Name: k[1], UID: last.UID, Generation: last.Generation, RevisionID: last.RevisionID},
			events.WorkloadRemoved, "")
	}
	switch {
	case unavailable:
		return passError
	case failed:
		return passFailed
	}
	return passConverged
}

// pullingLast returns entries with those whose last pull failed
// (PullBackoff.Failing) moved after the others, each group in intent
// order: a pull that hangs (Podman retries a registry that does not answer
// for seconds) never delays another Deployment. While no pull fails it is
// entries itself.
func pullingLast(entries []events.IntentEntry, b *PullBackoff) []events.IntentEntry {
	if b.empty() {
		return entries
	}
	first := make([]events.IntentEntry, 0, len(entries))
	var last []events.IntentEntry
	for _, e := range entries {
		if b.Failing(e) {
			last = append(last, e)
		} else {
			first = append(first, e)
		}
	}
	return append(first, last...)
}

// restoreOnce brings back the services a reboot left down (Restore) the
// first time the intent cannot be read, unless one was read before: a
// device that boots offline runs its workloads again without the control
// plane.
func (d *daemon) restoreOnce(ctx context.Context) {
	d.mu.Lock()
	done := d.restored
	d.restored = true
	d.mu.Unlock()
	if done || ctx.Err() != nil {
		return
	}
	started, err := d.o.Reconciler.Restore(ctx)
	if len(started) > 0 {
		d.log.InfoContext(ctx, "intent not readable: restarted the services a reboot left down", "services", started)
	}
	if err != nil {
		d.log.WarnContext(ctx, "restore services without the intent", "error", err)
	}
}

// unavailableText is what a Pending report says of err, which holds an
// *UnavailableError, after "<component> unavailable, retrying: ": the
// *runtime.PullError's one line for a registry (it names the image, the
// registry and what was tried), err's whole text otherwise.
func unavailableText(err error) string {
	var pe *runtime.PullError
	if ue, _ := AsUnavailable(err); ue.Component == ComponentRegistry && errors.As(ue.Err, &pe) {
		return pe.Error()
	}
	return err.Error()
}

// isUnavailable reports whether err holds an *UnavailableError.
func isUnavailable(err error) bool {
	_, ok := AsUnavailable(err)
	return ok
}

// scheduleRetry arranges another pass after a backoff when the engine or
// the secret source was unavailable, and resets the backoff when neither
// was.
func (d *daemon) scheduleRetry(unavailable bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !unavailable {
		d.backoff = 0
		return
	}
	d.backoff = min(max(2*d.backoff, firstEngineRetry), lastEngineRetry)
	if d.retry != nil {
		d.retry.Stop()
	}
	d.retry = time.AfterFunc(d.backoff, d.poke)
}

func (d *daemon) stopRetry() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.retry != nil {
		d.retry.Stop()
	}
	if d.rebaseWake != nil {
		d.rebaseWake.Stop()
	}
}

// status reports a workload phase when it differs from the last report of
// that Deployment.
func (d *daemon) status(ctx context.Context, e events.IntentEntry, phase events.WorkloadPhase, errText string) {
	d.publishStatus(ctx, e, events.WorkloadStatus{Namespace: e.Namespace, Deployment: e.Name, UID: e.UID, Generation: e.Generation,
		RevisionID: e.RevisionID, Phase: phase, Error: errText, Since: d.clock().UTC()})
}

// publishStatus reports ws, the status of e's Deployment, when it differs
// from the last report of that Deployment.
func (d *daemon) publishStatus(ctx context.Context, e events.IntentEntry, ws events.WorkloadStatus) {
	k := [2]string{e.Namespace, e.Name}
	d.mu.Lock()
	last, ok := d.reported[k]
	same := ok && last.UID == ws.UID && last.Generation == ws.Generation && last.RevisionID == ws.RevisionID &&
		last.Phase == ws.Phase && last.Error == ws.Error
	if !same {
		d.reported[k] = ws
	}
	d.mu.Unlock()
	if same {
		return
	}
	var opts []events.Option
	if e.UID != "" {
		opts = append(opts, events.WithCorrelation(e.UID, e.Generation))
	}
	d.report(ctx, events.Keys{Device: d.o.Device}, ws, opts...)
}

// clock is the device's clock: Options.Now, else time.Now.
func (d *daemon) clock() time.Time {
	if d.o.Now != nil {
		return d.o.Now()
	}
	return time.Now()
}

// rereport sends the last status of every Deployment again, unchanged
// (same phase, error and since), unless it settled (settle.go): after a
// reconnect the control plane hears the device's current state even if a
// report was lost with the connection, and no Deployment goes back
// through Applying for it.
func (d *daemon) rereport(ctx context.Context) {
	d.mu.Lock()
	last := make([]events.WorkloadStatus, 0, len(d.reported))
	for _, ws := range d.reported {
		last = append(last, ws)
	}
	d.mu.Unlock()
	for _, ws := range last {
		if !d.unsettled(offlineKey(ws)) {
			continue
		}
		var opts []events.Option
		if ws.UID != "" {
			opts = append(opts, events.WithCorrelation(ws.UID, ws.Generation))
		}
		d.report(ctx, events.Keys{Device: d.o.Device}, ws, opts...)
	}
}

// reportInventory sends the inventory; unless always, only when it
// changed since the last one sent or that one may have been lost with a
// connection (after a reconnect).
func (d *daemon) reportInventory(ctx context.Context, always bool) {
	inv := d.inventory()
	b, _ := json.Marshal(inv)
	d.mu.Lock()
	same := bytes.Equal(b, d.inventorySent)
	d.mu.Unlock()
	if !always && same && !d.unsettled(inventoryKey) {
		return
	}
	if d.report(ctx, events.Keys{Device: d.o.Device}, inv) != nil {
		d.mu.Lock()
		d.inventorySent = b
		d.mu.Unlock()
	}
}

func (d *daemon) heartbeat(ctx context.Context) {
	d.report(ctx, events.Keys{Device: d.o.Device}, events.DeviceHeartbeat{AgentVersion: d.o.AgentVersion, Uptime: time.Since(d.started)})
}

func (d *daemon) inventory() events.DeviceInventory {
	inv := events.DeviceInventory{Arch: goruntime.GOARCH, AgentVersion: d.o.AgentVersion, Labels: d.o.Labels,
		TimeZone: timeZoneName(d.clock().Location(), osZoneSources)}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PRETTY_NAME="); ok {
				inv.OS = cutText(strings.Trim(v, `"`), maxInventoryText)
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		inv.Kernel = cutText(strings.TrimSpace(string(b)), maxInventoryText)
	}
	return inv
}

// report publishes one report event on the device's own subject, and
// returns its message (nil when it could not be built). Reports are core
// publishes captured by the report streams: the agent never blocks on the
// control plane.
func (d *daemon) report(ctx context.Context, keys events.Keys, data events.Data, opts ...events.Option) *nats.Msg {
	// Fitted to the report streams (buildReport): a report over
	// events.MaxReportSize would be refused and lost.
	if d.o.EventStamp != nil {
		opts = append(opts, d.o.EventStamp)
	}
	m, err := buildReport(keys, data, opts...)
	if err != nil {
		d.log.ErrorContext(ctx, "build report", "type", data.EventType(), "error", err)
		return nil
	}
	// A core publish: the report streams never acknowledge (ADR 0006).
	if !d.o.Conn.IsConnected() {
		d.hold(offlineKey(data), m)
		return m
	}
	if err := d.o.Conn.PublishMsg(m); err != nil {
		d.log.WarnContext(ctx, "report not sent", "type", data.EventType(), "error", err)
		return m
	}
	switch data.(type) {
	case events.WorkloadStatus, events.WorkloadHealth, events.DeviceInventory, events.DeviceContainers:
		d.sentOn(offlineKey(data), time.Now()) // what a reconnect may send again
	}
	switch data.(type) {
	case events.WorkloadStatus, events.TaskStatus, events.CommandResult, events.WorkloadHealth:
		d.remember(m, time.Now())
	}
	return m
}

// Defaults of Options.RereportInterval and Options.EchoWindow.
const (
	DefaultRereportInterval = 30 * time.Second
	DefaultEchoWindow       = 90 * time.Second
)

// maxEchoes bounds the reports kept for echoing; past it the oldest go.
const maxEchoes = 1024

// sentReport is a report published at a time, kept to be echoed.
type sentReport struct {
	m  *nats.Msg
	at time.Time
}

// remember keeps m, published at now, for echo.
func (d *daemon) remember(m *nats.Msg, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sent = append(d.sent, sentReport{m: m, at: now})
	if len(d.sent) > maxEchoes {
		d.sent = slices.Delete(d.sent, 0, len(d.sent)-maxEchoes)
	}
}

// echo publishes again, unchanged, every report published less than
// EchoWindow before now, and forgets the older ones. The stream drops an
// echo whose original it stored (same Nats-Msg-Id within its duplicate
// window) and stores one whose original was lost.
func (d *daemon) echo(ctx context.Context, now time.Time) {
	d.settle(now)
	d.mu.Lock()
	keep := d.sent[:0]
	for _, r := range d.sent {
		if now.Sub(r.at) < d.o.EchoWindow {
			keep = append(keep, r)
		}
	}
	clear(d.sent[len(keep):])
	d.sent = keep
	again := slices.Clone(keep)
	d.mu.Unlock()
	if len(again) == 0 || !d.o.Conn.IsConnected() {
		return
	}
	for _, r := range again {
		if err := d.o.Conn.PublishMsg(r.m); err != nil {
			d.log.WarnContext(ctx, "report echo not sent", "subject", r.m.Subject, "error", err)
			return
		}
	}
}

// offlineKey is what a report coalesces on while offline.
func offlineKey(data events.Data) string {
	switch d := data.(type) {
	case events.WorkloadStatus:
		return "workload/" + d.Namespace + "/" + d.Deployment
	case events.CommandResult:
		return "command/" + d.CommandID
	case events.TaskStatus:
		return "task/" + d.UID
	case events.WorkloadHealth:
		return "health/" + d.Namespace + "/" + d.Deployment
	}
	return string(data.EventType())
}

// hold keeps a report for the reconnect, replacing an older one of the same
// key and dropping the oldest past MaxOfflineReports.
func (d *daemon) hold(key string, m *nats.Msg) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.offline == nil {
		d.offline = map[string]*nats.Msg{}
	}
	if _, ok := d.offline[key]; !ok {
		d.offlineKeys = append(d.offlineKeys, key)
	}
	d.offline[key] = m
	for len(d.offlineKeys) > MaxOfflineReports {
		delete(d.offline, d.offlineKeys[0])
		d.offlineKeys = d.offlineKeys[1:]
	}
	d.o.Metrics.setBuffered(len(d.offlineKeys))
}

// flushOffline sends the held reports, oldest first.
func (d *daemon) flushOffline(ctx context.Context) {
	d.mu.Lock()
	keys, held := d.offlineKeys, d.offline
	d.offlineKeys, d.offline = nil, nil
	d.o.Metrics.setBuffered(0)
	d.mu.Unlock()
	for _, k := range keys {
		m := held[k]
		if err := d.o.Conn.PublishMsg(m); err != nil {
			d.log.WarnContext(ctx, "held report not sent", "key", k, "error", err)
			continue
		}
		if resendable(k) {
			d.sentOn(k, time.Now())
		}
		if strings.HasSuffix(m.Subject, ".workload") || strings.HasSuffix(m.Subject, ".task") || strings.HasSuffix(m.Subject, ".command") ||
			strings.HasSuffix(m.Subject, ".health") {
			d.remember(m, time.Now())
		}
	}
}

// command answers one agent command with a device.command.result report.
// Commands are appended to FLEET_COMMANDS, so the message's reply subject is
// the sender's JetStream acknowledgement inbox: the agent never replies to it.
// A message that is not an agent.command event for this device's command
// subject (garbage, a JetStream answer aimed at the subject) is skipped,
// counted and logged without its payload, and gets no result: it has no
// command id to answer.
func (d *daemon) command(ctx context.Context, m *nats.Msg, poke func()) {
	ev, err := events.DecodeStored(m.Subject, m.Data)
	if err != nil {
		if re, ok := events.AsRecordError(err); ok {
			d.o.Skips.Skip(ctx, d.log, re)
		}
		return
	}
	cmd, err := events.Decode[events.AgentCommand](ev)
	res := events.CommandResult{CommandID: ev.ID.String(), Command: cmd.Command}
	switch {
	case err != nil:
		res.Error = "the agent.command's data does not decode" // not its text: it may quote the data
	case cmd.Command == CommandReconcileNow:
		// Read every secret value again: the one way, besides a new
		// revision and a restart, for a rotated secret to reach the
		// device's current revision.
		res.OK = true
		d.o.Reconciler.Pins.Forget()
		d.o.Reconciler.PullBackoff.Forget()
		poke()
	case cmd.Command == CommandReportInventory:
		res.OK = true
		d.reportInventory(ctx, true)
	case cmd.Command == events.CommandLogs && cmd.Logs != nil:
		// The answer is the log itself, on the request's subject (ADR
		// 0025): no command result.
		d.logs.start(*cmd.Logs)
		return
	case cmd.Command == events.CommandLogsStop && cmd.Logs != nil:
		d.logs.stop(cmd.Logs.Request)
		return
	case cmd.Command == events.CommandDiagnose && cmd.Logs != nil:
		d.diagnose(ctx, *cmd.Logs)
		return
	default:
		res.Error = fmt.Sprintf("unknown command %q: this agent knows %s and %s", cmd.Command, CommandReconcileNow, CommandReportInventory)
	}
	d.report(ctx, events.Keys{Device: d.o.Device}, res)
}
