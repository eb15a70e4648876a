package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/projections/runner"
)

// The exposure index (ADR 0033): ExposureIndexer folds the workload and
// health reports into what the exposure fold needs of them per device and
// revision, ExposureIndexWriter appends it to events.StreamIndex (the
// operator runs one, leader-only), and Exposure reads the matching
// revisions' records instead of every report, then the reports after the
// index's watermark.

// ExposureIndexer folds workload and health reports, in stream order, into
// exposure index records. It keeps, per device and Deployment, the
// revision the device last reported and its phase, and per device how
// many records it wrote: the fleet's size, not the history's.
//
// What one device adds is bounded (ADR 0033, "Addendum: a bound per
// device"): at most MaxRecordsPerDevice records, each at most
// events.MaxExposureIndexMessage bytes, about revisions Known holds; the
// report that would go past the limit, or write a larger record, or open a
// revision Known does not hold, writes instead the device's one unindexed
// marker, and nothing of the device is indexed after it: a question reads
// that device's own reports.
type ExposureIndexer struct {
	// Known reports whether a Deployment intent holds the revision
	// (namespace, name, UID, generation); nil: every revision is known.
	Known func(namespace, name, uid string, generation int64) bool
	// MaxRecordsPerDevice is how many records one device may have in the
	// index before it is marked unindexed; default
	// DefaultIndexRecordsPerDevice.
	MaxRecordsPerDevice int

	open   map[exposureKey]indexOpen
	count  map[string]int
	marked map[string]bool
}

// DefaultIndexRecordsPerDevice is ExposureIndexer.MaxRecordsPerDevice's
// default: the reports stream's per-device limit
// (events.DefaultReportsPerSubject); an honest device writes about three
// records per rollout of a Deployment, so about 3,000 rollouts.
const DefaultIndexRecordsPerDevice = events.DefaultReportsPerSubject

// indexOpen is the revision a device runs, as its reports say.
type indexOpen struct {
	uid   string
	gen   int64
	phase events.WorkloadPhase
}

// errNotIndexed is a report the index has nothing to say about, and that
// cannot take part in an exposure answer (a name that is no subject token).
var errNotIndexed = errors.New("not indexed")

// errUnindexed is a report that marks its device unindexed; its reason is
// the message.
type errUnindexed string

func (e errUnindexed) Error() string { return string(e) }

func (x *ExposureIndexer) init() {
	if x.open == nil {
		x.open = map[exposureKey]indexOpen{}
		x.count = map[string]int{}
		x.marked = map[string]bool{}
	}
}

func (x *ExposureIndexer) known(namespace, name, uid string, gen int64) bool {
	return x.Known == nil || x.Known(namespace, name, uid, gen)
}

// Fold returns the index records one report adds (none for most repeated
// reports, none for a device marked unindexed); an error wrapping
// events.ErrUndecodable for a report whose data does not decode (count it
// and skip it).
func (x *ExposureIndexer) Fold(rec events.Record) ([]events.IndexWrite, error) {
	x.init()
	device := rec.Event.Keys.Device
	if x.marked[device] {
		return nil, nil
	}
	base := events.ExposureIndexRecord{Source: rec.Sequence, Stored: rec.Stored.UTC()}
	var out []events.IndexWrite
	var err error
	switch rec.Event.Type {
	case events.TypeWorkloadStatus:
		p := projections.NewStoredPayload(rec)
		d, derr := p.WorkloadStatus()
		if derr != nil {
			return nil, fmt.Errorf("%w: %w", events.ErrUndecodable, derr)
		}
		out, err = x.workload(rec, base, device, d)
	case events.TypeWorkloadDegraded:
		d, derr := events.Decode[events.WorkloadHealth](rec.Event)
		if derr != nil {
			return nil, fmt.Errorf("%w: %w", events.ErrUndecodable, derr)
		}
		k := exposureKey{device, d.Namespace, d.Deployment}
		o, ok := x.open[k]
		if !ok || o.uid != d.UID || o.gen != d.Generation {
			return nil, nil
		}
		subj, serr := events.ExposureIndexSubject(d.Namespace, d.Deployment, o.gen, device)
		if serr != nil {
			return nil, nil // cannot happen: the open revision's subject was built
		}
		r := base
		r.Kind, r.UID, r.Last = events.ExposureDegraded, o.uid, true
		out = []events.IndexWrite{{Subject: subj, Record: r}}
	}
	var reason errUnindexed
	switch {
	case errors.As(err, &reason):
	case err != nil:
		return nil, err
	case len(out) == 0:
		return nil, nil
	case x.count[device]+len(out) > x.limit():
		reason = events.UnindexedLimit
	default:
		for _, w := range out {
			if indexMessageSize(w) > events.MaxExposureIndexMessage {
				reason = events.UnindexedTooLarge
				break
			}
		}
	}
	if reason == "" {
		x.count[device] += len(out)
		return out, nil
	}
	// The device's one marker: nothing more of it is indexed.
	subj, serr := events.ExposureUnindexedSubject(device)
	if serr != nil {
		return nil, fmt.Errorf("%w: %w", errNotIndexed, serr) // cannot happen: a report's device is a token
	}
	x.marked[device] = true
	r := base
	r.Kind, r.Reason, r.Last = events.ExposureUnindexed, string(reason), true
	return []events.IndexWrite{{Subject: subj, Record: r}}, nil
}

// indexMessageSize is the size of one index message, subject and JSON
// record: encoded only when a bound on it (every string six bytes a
// character, as JSON escapes, and every other field at its longest) could
// exceed events.MaxExposureIndexMessage, which a real record never does.
func indexMessageSize(w events.IndexWrite) int {
	r := w.Record
	const fixed = 256 // the field names, kind, numbers, time and quotes at their longest
	if len(w.Subject)+6*(len(r.UID)+len(r.Event)+len(r.Phase)+len(r.End)+len(r.Reason))+fixed <= events.MaxExposureIndexMessage {
		return 0
	}
	data, err := json.Marshal(r)
	if err != nil {
		return math.MaxInt
	}
	return len(w.Subject) + len(data)
}

func (x *ExposureIndexer) limit() int {
	if x.MaxRecordsPerDevice > 0 {
		return x.MaxRecordsPerDevice
	}
	return DefaultIndexRecordsPerDevice
}

// workload is Fold of a workload report: exposureFold.workload's rules,
// for every revision Known holds. A report opening one it does not hold
// returns an errUnindexed.
func (x *ExposureIndexer) workload(rec events.Record, base events.ExposureIndexRecord, device string, d events.WorkloadStatus) ([]events.IndexWrite, error) {
	if _, err := events.ExposureIndexFilter(d.Namespace, d.Deployment, d.Generation); err != nil {
		// No Deployment has this namespace or name: no answer can hold it.
		return nil, fmt.Errorf("%w: %w", errNotIndexed, err)
	}
	k := exposureKey{device, d.Namespace, d.Deployment}
	o, isOpen := x.open[k]
	same := isOpen && o.uid == d.UID && o.gen == d.Generation
	var out []events.IndexWrite
	if isOpen && (!same || d.Phase == events.WorkloadRemoved) {
		r := base
		r.Kind, r.UID, r.Event = events.ExposureEnded, o.uid, rec.Event.ID.String()
		switch {
		case d.Phase == events.WorkloadRemoved:
			r.End = EndRemoved
		case d.UID == o.uid && d.Generation < o.gen:
			r.End, r.EndGeneration = EndRolledBack, d.Generation
		default:
			r.End, r.EndGeneration = EndReplaced, d.Generation
		}
		subj, _ := events.ExposureIndexSubject(d.Namespace, d.Deployment, o.gen, device)
		out = append(out, events.IndexWrite{Subject: subj, Record: r})
		delete(x.open, k)
		isOpen = false
	}
	if d.Phase != events.WorkloadRemoved {
		if !isOpen && !x.known(d.Namespace, d.Deployment, d.UID, d.Generation) {
			// An interval no question can find in the index: a question
			// whose revision this is (created later) reads the device's
			// reports.
			return nil, errUnindexed(events.UnindexedUnknownRevision)
		}
		subj, err := events.ExposureIndexSubject(d.Namespace, d.Deployment, d.Generation, device)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errNotIndexed, err)
		}
		r := base
		r.UID, r.Phase = d.UID, d.Phase
		switch {
		case !isOpen:
			r.Kind, r.Event = events.ExposureOpened, rec.Event.ID.String()
			out = append(out, events.IndexWrite{Subject: subj, Record: r})
		case o.phase != d.Phase:
			r.Kind = events.ExposurePhase
			out = append(out, events.IndexWrite{Subject: subj, Record: r})
		}
		x.open[k] = indexOpen{uid: d.UID, gen: d.Generation, phase: d.Phase}
	}
	if len(out) > 0 {
		out[len(out)-1].Record.Last = true
	}
	return out, nil
}

// restore folds back one report's records, as stored, into the state.
func (x *ExposureIndexer) restore(recs []events.IndexRecord) {
	x.init()
	for _, r := range recs {
		k := exposureKey{r.Key.Device, r.Key.Namespace, r.Key.Name}
		x.count[r.Key.Device]++
		switch r.Record.Kind {
		case events.ExposureOpened, events.ExposurePhase:
			x.open[k] = indexOpen{uid: r.Record.UID, gen: r.Key.Generation, phase: r.Record.Phase}
		case events.ExposureEnded:
			delete(x.open, k)
		case events.ExposureUnindexed:
			x.marked[r.Key.Device] = true
		}
	}
}

// IndexStore is what ExposureIndexWriter reads and writes: the reports,
// and the index. *events.Store implements it.
type IndexStore interface {
	runner.Reader
	IndexLastSequence(ctx context.Context) (uint64, error)
	ReplayIndex(ctx context.Context, filters []string, after, upTo uint64) iter.Seq2[events.IndexRecord, error]
	AppendIndex(ctx context.Context, last uint64, writes []events.IndexWrite) (uint64, error)
}

// ExposureIndexWriter keeps the exposure index (ADR 0033): it reads the
// index back (its state and where it stopped), then folds every workload
// and health report after the last one the index covers and appends their
// records, each expecting the stream's last sequence (one writer; a
// second, or a deleted stream, makes it start over). It never stops on a
// report: one that does not decode, or names what no subject can hold, is
// counted and skipped.
type ExposureIndexWriter struct {
	// Store reads the reports and the index and appends to it. Required.
	Store IndexStore
	// Log: default discard.
	Log *slog.Logger
	// Skips counts the reports skipped (nil-safe).
	Skips *events.SkipCounter
	// Batch is how many records are appended at once at most; default
	// DefaultIndexBatch.
	Batch int
	// RetryMin is the first wait before starting over after a failure
	// (default one second; it doubles up to a minute).
	RetryMin time.Duration
	// MaxRecordsPerDevice bounds what one device can add to the index
	// (ExposureIndexer.MaxRecordsPerDevice); default
	// DefaultIndexRecordsPerDevice.
	MaxRecordsPerDevice int

	written, skipped uint64
}

// DefaultIndexBatch is ExposureIndexWriter.Batch's default.
const DefaultIndexBatch = 1024

// Validate checks the writer's configuration.
func (w *ExposureIndexWriter) Validate() error {
	if w.Store == nil {
		return fmt.Errorf("%w: exposure index writer: Store is nil: pass an *events.Store", ErrInvalidOptions)
	}
	if w.MaxRecordsPerDevice < 0 {
		return fmt.Errorf("%w: exposure index writer: MaxRecordsPerDevice is %d: use 0 (default %d) or a positive count", ErrInvalidOptions, w.MaxRecordsPerDevice, DefaultIndexRecordsPerDevice)
	}
	if w.Batch < 0 {
		return fmt.Errorf("%w: exposure index writer: Batch is %d: use 0 (default %d) or a positive count", ErrInvalidOptions, w.Batch, DefaultIndexBatch)
	}
	return nil
}

// Written is how many records the writer appended.
func (w *ExposureIndexWriter) Written() uint64 { return w.written }

// Run keeps the index until ctx ends: it catches up with the reports,
// then follows them. A failed read or append starts it over from the
// index, after a wait.
func (w *ExposureIndexWriter) Run(ctx context.Context) error {
	if err := w.Validate(); err != nil {
		return err
	}
	wait := w.RetryMin
	if wait <= 0 {
		wait = time.Second
	}
	for {
		err := w.run(ctx, true)
		if ctx.Err() != nil {
			return nil
		}
		w.log().WarnContext(ctx, "exposure index: starting over from the index", "error", err, "retryIn", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Minute)
	}
}

// RunToEnd brings the index up to the reports stored when it starts, then
// returns (tests, benchmarks, a rebuild by hand).
func (w *ExposureIndexWriter) RunToEnd(ctx context.Context) error {
	if err := w.Validate(); err != nil {
		return err
	}
	return w.run(ctx, false)
}

func (w *ExposureIndexWriter) log() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}

// run reads the index back, then folds the reports after it.
func (w *ExposureIndexWriter) run(ctx context.Context, follow bool) error {
	revs := &intentRevisions{r: w.Store, log: w.log(), known: map[revisionName]bool{}}
	if err := revs.refresh(ctx); err != nil {
		return err
	}
	x := &ExposureIndexer{Known: func(namespace, name, uid string, gen int64) bool {
		return revs.holds(ctx, revisionName{namespace, name, uid, gen})
	}, MaxRecordsPerDevice: w.MaxRecordsPerDevice}
	last, err := w.Store.IndexLastSequence(ctx)
	if err != nil {
		return err
	}
	// Records are folded back a report at a time: those of a report whose
	// last record is not stored (a writer stopped between them) are
	// written again, the ones stored dropped.
	var pending []events.IndexRecord
	var after uint64
	for r, err := range w.Store.ReplayIndex(ctx, []string{events.ExposureIndexSubjects}, 0, last) {
		if err != nil {
			return err
		}
		pending = append(pending, r)
		if r.Record.Last {
			x.restore(pending)
			after, pending = r.Record.Source, pending[:0]
		}
	}
	stored := len(pending)
	if stored > 0 {
		after = pending[0].Record.Source - 1
	}
	w.log().InfoContext(ctx, "exposure index: resuming", "indexRecords", last, "afterReport", after, "partial", stored)
	batch := w.Batch
	if batch == 0 {
		batch = DefaultIndexBatch
	}
	rn := &runner.Runner{Name: "exposure index", Reader: w.Store, Log: w.Log,
		Sources: []runner.Source{{Filters: []string{filterWorkload, filterHealth}, After: after}}}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan runner.Msg, 1024)
	go func() {
		defer close(in)
		if follow {
			rn.Run(rctx, in)
		} else {
			rn.RunToEnd(rctx, in)
		}
	}()
	var buf []events.IndexWrite
	flush := func() error {
		n, err := w.Store.AppendIndex(ctx, last, buf)
		w.written += n - last
		last, buf = n, buf[:0]
		return err
	}
	for {
		var m runner.Msg
		var ok bool
		select {
		case m, ok = <-in:
		default:
			if len(buf) > 0 {
				if err := flush(); err != nil {
					return err
				}
			}
			m, ok = <-in
		}
		if !ok {
			if len(buf) > 0 {
				if err := flush(); err != nil {
					return err
				}
			}
			return ctx.Err()
		}
		switch {
		case m.Err != nil:
			return m.Err
		case m.Skip != nil:
			w.skipped++
			w.Skips.Skip(ctx, w.log(), m.Skip)
		case m.Caught:
			if len(buf) > 0 {
				if err := flush(); err != nil {
					return err
				}
			}
			if !follow && m.Live {
				return nil
			}
		default:
			writes, err := x.Fold(m.Record)
			if revs.err != nil {
				return revs.err
			}
			if err != nil {
				if errors.Is(err, events.ErrUndecodable) {
					w.Skips.Skip(ctx, w.log(), events.InvalidData(m.Record, err))
				}
				w.skipped++
				continue
			}
			if stored > 0 {
				// The report the index stopped in: its first records are
				// stored.
				if stored > len(writes) {
					return fmt.Errorf("exposure index: report %d has %d records stored but folds into %d: delete the index to rebuild it", m.Record.Sequence, stored, len(writes))
				}
				for i, r := range pending[:stored] {
					if r.Subject != writes[i].Subject || r.Record.Kind != writes[i].Record.Kind {
						return fmt.Errorf("exposure index: report %d's record %d is stored as %s on %s but folds into %s on %s: delete the index to rebuild it",
							m.Record.Sequence, i, r.Record.Kind, r.Subject, writes[i].Record.Kind, writes[i].Subject)
					}
				}
				writes, stored = writes[stored:], 0
			}
			buf = append(buf, writes...)
			if len(buf) >= batch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
}

// revisionName names one Deployment revision as a report does.
type revisionName struct {
	namespace, name, uid string
	gen                  int64
}

// intentRevisions is every Deployment revision the intent holds, as the
// index writer knows it: read at its start, and again up to the intent's
// end when a report names one it does not know (once per new revision, and
// once per device naming one that does not exist: that device is then
// unindexed).
type intentRevisions struct {
	r     runner.Reader
	log   *slog.Logger
	known map[revisionName]bool
	after uint64 // the last intent record read
	err   error  // a failed read: the writer starts over
}

// holds reports whether the intent holds the revision, reading the intent
// again when it is not known yet.
func (v *intentRevisions) holds(ctx context.Context, n revisionName) bool {
	if v.known[n] {
		return true
	}
	if err := v.refresh(ctx); err != nil {
		v.err = err
		return false
	}
	return v.known[n]
}

// refresh reads the intent records after the last one read.
func (v *intentRevisions) refresh(ctx context.Context) error {
	rn := &runner.Runner{Name: "exposure index intent", Reader: v.r, Log: v.log,
		Sources: []runner.Source{{Filters: []string{filterDeploymentIntent}, After: v.after}}}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan runner.Msg, 256)
	go func() {
		defer close(in)
		rn.RunOnce(rctx, in)
	}()
	var failed error
	for m := range in {
		switch {
		case m.Err != nil:
			failed = fmt.Errorf("exposure index: read the intent: %w", m.Err)
		case m.Skip != nil, m.Caught:
		default:
			v.after = m.Record.Sequence
			if m.Record.Event.Type != events.TypeDeploymentRevisionCreated {
				continue
			}
			d, err := events.Decode[events.DeploymentRevisionCreated](m.Record.Event)
			if err != nil {
				continue // the intent's own readers count it
			}
			k := m.Record.Event.Keys
			v.known[revisionName{k.Namespace, k.Name, d.UID, d.Generation}] = true
		}
	}
	if failed != nil {
		return failed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("exposure index: %w", err)
	}
	return nil
}

// exposureIndexReader is what Exposure reads of the exposure index;
// *events.Store implements it.
type exposureIndexReader interface {
	IndexLast(ctx context.Context) (events.IndexRecord, error)
	ReplayIndex(ctx context.Context, filters []string, after, upTo uint64) iter.Seq2[events.IndexRecord, error]
}

// indexFiltersPerRead bounds the subject filters of one index read.
const indexFiltersPerRead = 64

// indexRev names one matching revision's records in the index.
type indexRev struct {
	namespace, name string
	gen             int64
	uid             string
}

// readIndex folds the matching revisions' index records into the
// intervals, as the reports up to the index's watermark would: it returns
// the watermark (the last report the index covers; 0 when the index is
// empty or covers nothing since first) and the devices whose intervals it
// cannot give exactly (one opened before first, which a read of the
// reports from first would open later; one the writer marked unindexed):
// their reports up to the watermark are read instead.
func (f *exposureFold) readIndex(ctx context.Context, ix exposureIndexReader, first time.Time) (uint64, []string, error) {
	last, err := ix.IndexLast(ctx)
	if errors.Is(err, events.ErrNotFound) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	w := last.Record.Source
	if !last.Record.Last {
		w-- // the writer stopped within a report: the tail reads it again
	}
	if w == 0 || last.Record.Stored.Before(first) {
		return 0, nil, nil
	}
	suspect := map[string]bool{}
	// The unindexed markers, in a read of their own (a consumer of one
	// filter reads by the server's subject index; with the revisions'
	// filters it would scan the stream): their devices' records are left
	// out and their reports read instead, whenever they were marked.
	for rec, err := range ix.ReplayIndex(ctx, []string{events.ExposureUnindexedFilter}, 0, last.Sequence) {
		if err != nil {
			return 0, nil, err
		}
		suspect[rec.Key.Device] = true
	}
	byRev := map[indexRev]*exposedRev{}
	var filters []string
	seen := map[string]bool{}
	for _, r := range f.order {
		byRev[indexRev{r.namespace, r.name, r.Generation, r.UID}] = r
		fl, err := events.ExposureIndexFilter(r.namespace, r.name, r.Generation)
		if err != nil || seen[fl] {
			continue
		}
		seen[fl] = true
		filters = append(filters, fl)
	}
	type open struct {
		iv  *ExposureInterval
		rev *exposedRev
	}
	cur := map[string]open{}
	var closed []ExposureInterval
	for len(filters) > 0 {
		chunk := filters[:min(len(filters), indexFiltersPerRead)]
		filters = filters[len(chunk):]
		for rec, err := range ix.ReplayIndex(ctx, chunk, 0, last.Sequence) {
			if err != nil {
				return 0, nil, err
			}
			x := rec.Record
			if x.Source > w || (!f.q.At.IsZero() && x.Stored.After(f.q.At)) {
				continue
			}
			r := byRev[indexRev{rec.Key.Namespace, rec.Key.Name, rec.Key.Generation, x.UID}]
			if r == nil {
				continue // another Deployment's UID under the same name
			}
			o, isOpen := cur[rec.Subject]
			switch x.Kind {
			case events.ExposureOpened:
				device := rec.Key.Device
				o = open{iv: &ExposureInterval{Device: device, Deployment: r.Deployment, UID: r.UID, Generation: r.Generation, RevisionID: r.RevisionID,
					Role: r.role(device), Since: x.Stored.UTC(), SinceEvent: x.Event, End: EndRunning}, rev: r}
				cur[rec.Subject], isOpen = o, true
				if x.Stored.Before(first) {
					suspect[device] = true
				}
				fallthrough
			case events.ExposurePhase:
				if !isOpen {
					continue
				}
				o.iv.LastPhase = x.Phase
				switch x.Phase {
				case events.WorkloadConverged:
					if o.iv.Converged.IsZero() {
						o.iv.Converged = x.Stored.UTC()
					}
				case events.WorkloadFailed:
					o.iv.Failed = true
				}
			case events.ExposureDegraded:
				if isOpen {
					o.iv.Degraded++
				}
			case events.ExposureEnded:
				if !isOpen {
					continue
				}
				o.iv.Until, o.iv.UntilEvent, o.iv.End, o.iv.EndGeneration = x.Stored.UTC(), x.Event, x.End, x.EndGeneration
				closed = append(closed, *o.iv)
				delete(cur, rec.Subject)
			}
		}
	}
	for _, iv := range closed {
		if !suspect[iv.Device] {
			f.closed = append(f.closed, iv)
		}
	}
	for _, o := range cur {
		if !suspect[o.iv.Device] {
			f.open[exposureKey{o.iv.Device, o.rev.namespace, o.rev.name}] = o.iv
		}
	}
	var devices []string
	for d := range suspect {
		devices = append(devices, d)
	}
	slices.Sort(devices)
	return w, devices, nil
}

// resetReports forgets the intervals (an index read that failed midway).
func (f *exposureFold) resetReports() {
	f.open, f.closed = map[exposureKey]*ExposureInterval{}, nil
}

// readDevice folds one device's reports from first up to the report w.
func (f *exposureFold) readDevice(ctx context.Context, device string, first time.Time, w uint64) error {
	wl, err := events.ReportSubject(device, events.ReportWorkload)
	if err != nil {
		return fmt.Errorf("history: exposure index names device %q: %w", device, err)
	}
	hl, err := events.ReportSubject(device, events.ReportHealth)
	if err != nil {
		return fmt.Errorf("history: exposure index names device %q: %w", device, err)
	}
	src := runner.Source{Filters: []string{wl, hl}, From: events.FromTime(first), Until: f.q.At}
	return f.read(ctx, src, func(ctx context.Context, rec events.Record) {
		if rec.Sequence <= w {
			f.report(ctx, rec)
		}
	})
}
