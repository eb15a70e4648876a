package history

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/projections/runner"
)

// Reader is what history needs of the event store: the replays a
// projections/runner makes, which end once caught up. *events.Store
// implements it.
type Reader interface {
	runner.Reader
}

// Options configure a History.
type Options struct {
	// Reader reads the streams. Required.
	Reader Reader
	// Logger receives debug records of the reads, and a warning for every
	// stored record skipped because it does not decode. Default: discard.
	Logger *slog.Logger
	// Skips counts the records skipped because they do not decode.
	// Nil-safe.
	Skips *events.SkipCounter
	// NoIndex makes Exposure read every report since the first matching
	// revision, as without the exposure index (ADR 0033): a check of the
	// index, or a comparison.
	NoIndex bool
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Reader == nil {
		return fmt.Errorf("%w: Reader is nil: pass an *events.Store on a connected client", ErrInvalidOptions)
	}
	return nil
}

// History answers questions about the past from the streams. It is safe for
// concurrent use; every call reads the streams again.
type History struct {
	r       Reader
	log     *slog.Logger
	skips   *events.SkipCounter
	noIndex bool
}

// New returns a History.
func New(o Options) (*History, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &History{r: o.Reader, log: o.Logger, skips: o.Skips, noIndex: o.NoIndex}, nil
}

// Entry is one event on a timeline.
type Entry struct {
	// Time is when the stream stored the event (the server's clock).
	// Timelines are in this order.
	Time time.Time `json:"time"`
	// EventTime is when the writer created the event (the writer's clock).
	EventTime time.Time `json:"eventTime"`
	// ID is the event's ULID (also its Nats-Msg-Id).
	ID string `json:"id"`
	// Type is the event type.
	Type events.Type `json:"type"`
	// Stream, Sequence and Subject say where the event is stored.
	Stream   string `json:"stream"`
	Sequence uint64 `json:"sequence"`
	Subject  string `json:"subject"`
	// Deployment is namespace/name of the Deployment the event concerns, if
	// any.
	Deployment string `json:"deployment,omitempty"`
	// Device is the device the event concerns, if one.
	Device string `json:"device,omitempty"`
	// Generation and RevisionID name the revision the event concerns, if
	// any.
	Generation int64  `json:"generation,omitempty"`
	RevisionID string `json:"revisionId,omitempty"`
	// Summary is a one-line human description.
	Summary string `json:"summary"`
	// Stage is the Deployment's rollout stage after the event, as the
	// rollout projection folds it (Deployment timelines only).
	Stage projections.Stage `json:"stage,omitempty"`
	// Ignored says why the rollout projection ignored a workload report
	// (an older revision, a device outside the frozen targets); empty when
	// it counted.
	Ignored string `json:"ignored,omitempty"`
	// Data is the event's data as stored.
	Data json.RawMessage `json:"data"`
}

func entryOf(rec events.Record) Entry {
	e := Entry{Time: rec.Stored.UTC(), EventTime: rec.Event.Time.UTC(), ID: rec.Event.ID.String(), Type: rec.Event.Type,
		Stream: rec.Stream, Sequence: rec.Sequence, Subject: rec.Subject, Device: rec.Event.Keys.Device, Data: rec.Event.Data}
	if rec.Event.Keys.Namespace != "" {
		e.Deployment = rec.Event.Keys.Namespace + "/" + rec.Event.Keys.Name
	}
	if c := rec.Event.Correlation; c != nil {
		e.Generation = c.Generation
	}
	return e
}

// streamRank orders records stored at the same instant in different
// streams: intent before the rollout decisions it causes before the reports
// that follow them.
var streamRank = map[string]int{events.StreamIntent: 0, events.StreamRollout: 1, events.StreamReports: 2,
	events.StreamTelemetry: 3, events.StreamLiveness: 3, events.StreamCommands: 4, events.StreamAudit: 5}

// read is one replay: a filter, where it starts, and an optional filter on
// the decoded records.
type read struct {
	filter string
	from   events.Start
	keep   func(events.Record) bool
}

// collect replays every read up to (and including) the last event stored at
// or before until (zero: to the end), one read after the other through a
// projections/runner, and returns the records merged in stored order. A
// record that does not decode is skipped, counted and logged; the read goes
// on. A read that fails ends the collection with its error.
func (h *History) collect(ctx context.Context, until time.Time, reads ...read) ([]events.Record, error) {
	rn := &runner.Runner{Name: "history", Reader: h.r, Log: h.log}
	for i, rd := range reads {
		rn.Sources = append(rn.Sources, runner.Source{Filters: []string{rd.filter}, From: rd.from, Until: until, AfterPrevious: i > 0})
	}
	in := make(chan runner.Msg)
	go func() {
		defer close(in)
		rn.RunOnce(ctx, in)
	}()
	var out []events.Record
	var failed error
	n := make([]int, len(reads))
	for m := range in {
		rd := reads[m.Source]
		switch {
		case m.Err != nil:
			failed = fmt.Errorf("history: read %s: %w", rd.filter, m.Err)
		case m.Caught:
			h.log.DebugContext(ctx, "history read", "filter", rd.filter, "records", n[m.Source])
		case m.Skip != nil:
			h.skips.Skip(ctx, h.log, m.Skip)
		case rd.keep == nil || rd.keep(m.Record):
			out = append(out, m.Record)
			n[m.Source]++
		}
	}
	if failed != nil {
		return nil, failed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	slices.SortStableFunc(out, compareRecords)
	return out, nil
}

// compareRecords orders records by stored time, then stream, then sequence.
func compareRecords(a, b events.Record) int {
	return cmp.Or(a.Stored.Compare(b.Stored), cmp.Compare(streamRank[a.Stream], streamRank[b.Stream]),
		cmp.Compare(a.Sequence, b.Sequence))
}

// Filters of whole families.
const (
	filterDeploymentIntent = "fleet.intent.deployment.*.*"
	filterAllIntent        = "fleet.intent.>"
	filterRollouts         = "fleet.rollout.deployment.*.*"
	filterWorkload         = "fleet.report.*.workload"
)

// RolloutState is one Deployment's rollout as the rollout projection folds
// it: the fields of the Deployment status the operator patches, plus the
// stage and whether the Deployment was deleted.
type RolloutState struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Stage is the projection's rollout stage.
	Stage projections.Stage `json:"stage"`
	// Phase is status.phase (Pending, Canary, Progressing, Succeeded,
	// Failed).
	Phase string `json:"phase"`
	// Ready, Reason and Message are the Ready condition.
	Ready   string `json:"ready"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Since is when the current stage was entered.
	Since  time.Time            `json:"since"`
	Counts events.RolloutCounts `json:"counts"`
	// Targets and Canaries are the revision's frozen sets.
	Targets  []string `json:"targets"`
	Canaries []string `json:"canaries"`
	// LatestFailure is the most recent failure report of a target.
	LatestFailure *Failure `json:"latestFailure,omitempty"`
	// Deleted is true once the Deployment was deleted (the operator no
	// longer patches its status).
	Deleted bool `json:"deleted,omitempty"`
	// Batches is the progress of each batch of the revision's rollout
	// plan (ADR 0016), in plan order; nil without a plan.
	Batches []BatchProgress `json:"batches,omitempty"`
}

// BatchProgress is one batch of a rollout plan as the fold has it: its
// members' results and its transitions.
type BatchProgress struct {
	// Size is how many targets the batch has; Converged and Failures
	// count their latest reports of the revision.
	Size      int `json:"size"`
	Converged int `json:"converged"`
	Failures  int `json:"failures"`
	// SuccessPercent of the batch must converge.
	SuccessPercent int `json:"successPercent"`
	// Started, Soaking, Succeeded and Failed are the batch's transitions;
	// Approved (and ApprovedBy) its approval.
	Started    bool   `json:"started,omitempty"`
	Soaking    bool   `json:"soaking,omitempty"`
	Succeeded  bool   `json:"succeeded,omitempty"`
	Failed     bool   `json:"failed,omitempty"`
	Approved   bool   `json:"approved,omitempty"`
	ApprovedBy string `json:"approvedBy,omitempty"`
}

// batchesOf is the progress of r's plan batches; nil without a plan.
func batchesOf(r projections.Rollout) []BatchProgress {
	if r.Plan == nil || len(r.Plan.Batches) == 0 {
		return nil
	}
	tallies := r.BatchTallies()
	out := make([]BatchProgress, len(r.Plan.Batches))
	for i, pb := range r.Plan.Batches {
		b := &out[i]
		b.Size, b.SuccessPercent = pb.Size, pb.SuccessPercent
		if i < len(tallies) {
			b.Converged, b.Failures = tallies[i].Converged, tallies[i].Failed
		}
		if i < len(r.Batches) {
			bs := r.Batches[i]
			b.Started, b.Soaking, b.Succeeded, b.Failed = !bs.Started.IsZero(), !bs.Soaking.IsZero(), bs.Succeeded, bs.Failed
			b.Approved, b.ApprovedBy = bs.Approved, bs.ApprovedBy
		}
	}
	return out
}

// Failure is one device's failure report.
type Failure struct {
	Device string    `json:"device"`
	Error  string    `json:"error"`
	Time   time.Time `json:"time"`
}

// stateOf turns a folded rollout into its RolloutState; false for a
// Deployment without a revision.
func stateOf(namespace, name string, r projections.Rollout) (RolloutState, bool) {
	st, ok := r.Status()
	if !ok {
		return RolloutState{}, false
	}
	s := RolloutState{Namespace: namespace, Name: name, UID: r.UID, Generation: r.Generation, RevisionID: r.RevisionID,
		Stage: r.Stage, Phase: string(st.Phase), Since: r.StageAt.UTC(), Counts: r.Counts(),
		Targets: r.Targets, Canaries: r.Canaries, Deleted: r.Deleted, Batches: batchesOf(r)}
	if len(st.Conditions) > 0 {
		c := st.Conditions[0]
		s.Ready, s.Reason, s.Message = string(c.Status), c.Reason, c.Message
	}
	if f := st.LatestFailure; f != nil {
		s.LatestFailure = &Failure{Device: f.Device, Error: f.Error, Time: f.Time.UTC()}
	}
	return s, true
}

// workloadKey returns the Deployment a workload report concerns.
func workloadKey(rec events.Record) (events.Keys, events.WorkloadStatus, bool) {
	d, err := events.Decode[events.WorkloadStatus](rec.Event)
	if err != nil {
		return events.Keys{}, d, false
	}
	return events.Keys{Namespace: d.Namespace, Name: d.Deployment}, d, true
}

// skipData counts and logs a record whose envelope decoded but whose data
// does not decode into its type's struct (err is Decode's): it is left out
// of the answer like any undecodable record.
func (h *History) skipData(ctx context.Context, rec events.Record, err error) {
	h.skips.Skip(ctx, h.log, events.InvalidData(rec, err))
}
