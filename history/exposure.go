package history

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/projections/runner"
	"github.com/nationtech/harmony-fleet/score"
)

// ExposureQuery says which revisions `fleet history exposure` looks for:
// those whose score names Image, whose score digest is ScoreDigest, of the
// Deployment Deployment; every field set must match, at least one must be
// set.
type ExposureQuery struct {
	// Image is an image reference or digest: a digest (sha256:…) matches
	// every image pinned to it; a reference with a digest (repo@sha256:…)
	// the images of that repository pinned to it; a reference with a tag
	// (repo:tag) the images of that repository and tag; a repository
	// alone (repo) every image of it, whatever its tag or digest.
	Image string `json:"image,omitempty"`
	// ScoreDigest matches a revision's score digest exactly.
	ScoreDigest string `json:"scoreDigest,omitempty"`
	// Deployment is namespace/name: only that Deployment's revisions.
	Deployment string `json:"deployment,omitempty"`
	// At, when set, answers as of that instant: only the events stored at
	// or before it, and intervals still open then are measured to it.
	At time.Time `json:"at,omitzero"`
	// Now is when intervals still open are measured to without At (zero:
	// the time of the query).
	Now time.Time `json:"-"`
}

// ErrInvalidQuery is wrapped by ExposureQuery.Validate.
var ErrInvalidQuery = errors.New("invalid exposure query")

// Validate checks the query.
func (q ExposureQuery) Validate() error {
	if q.Image == "" && q.ScoreDigest == "" && q.Deployment == "" {
		return fmt.Errorf("%w: give --image (a reference or a digest, e.g. registry.example.com/api:v2 or sha256:…), --score-digest or --deployment <namespace>/<name>", ErrInvalidQuery)
	}
	if q.Image != "" {
		if _, err := parseImageRef(q.Image); err != nil {
			return fmt.Errorf("%w: --image %q: %w", ErrInvalidQuery, q.Image, err)
		}
	}
	if q.Deployment != "" {
		ns, name, ok := strings.Cut(q.Deployment, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("%w: --deployment %q is not <namespace>/<name>: give both, e.g. lab/analysis-api", ErrInvalidQuery, q.Deployment)
		}
		if _, err := events.DeploymentIntentSubject(ns, name); err != nil {
			return fmt.Errorf("%w: --deployment %q: %w", ErrInvalidQuery, q.Deployment, err)
		}
	}
	return nil
}

// imageRef is an image reference split into its parts.
type imageRef struct {
	repo, tag, digest string
}

// parseImageRef splits a reference (repo, repo:tag, repo@digest,
// repo:tag@digest) or a bare digest (sha256:…).
func parseImageRef(s string) (imageRef, error) {
	if s == "" || strings.ContainsAny(s, " \t\r\n") {
		return imageRef{}, errors.New("an image reference has no spaces: give e.g. registry.example.com/api:v2, registry.example.com/api@sha256:… or sha256:…")
	}
	if strings.HasPrefix(s, "sha256:") {
		return imageRef{digest: s}, nil
	}
	name, digest, _ := strings.Cut(s, "@")
	if digest != "" && !strings.HasPrefix(digest, "sha256:") {
		return imageRef{}, fmt.Errorf("digest %q: a digest starts with sha256: (sha256:<64 hex digits>)", digest)
	}
	r := imageRef{repo: name, digest: digest}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		r.repo, r.tag = name[:i], name[i+1:]
	}
	if r.repo == "" {
		return imageRef{}, errors.New("no repository: give e.g. registry.example.com/api:v2")
	}
	return r, nil
}

// MatchImage reports whether image, a score's image reference, is one
// query (ExposureQuery.Image's forms) names; an error when query is not an
// image reference or digest.
func MatchImage(query, image string) (bool, error) {
	q, err := parseImageRef(query)
	if err != nil {
		return false, fmt.Errorf("%w: image %q: %w", ErrInvalidQuery, query, err)
	}
	return q.matches(image), nil
}

// matches reports whether image (a score's reference) is one the query
// names: every part the query gives must be equal.
func (q imageRef) matches(image string) bool {
	r, err := parseImageRef(image)
	if err != nil {
		return false
	}
	return (q.repo == "" || q.repo == r.repo) && (q.tag == "" || q.tag == r.tag) && (q.digest == "" || q.digest == r.digest)
}

// Exposure is the answer of `fleet history exposure`: every device that
// ran a matching revision, and when (ADR 0021).
type Exposure struct {
	Query ExposureQuery `json:"query"`
	// AsOf is when intervals still open are measured to.
	AsOf time.Time `json:"asOf"`
	// Revisions are the matching revisions, in the order they were
	// created.
	Revisions []ExposedRevision `json:"revisions"`
	// Intervals are the devices' intervals on those revisions, by device,
	// then start.
	Intervals []ExposureInterval `json:"intervals"`
	// Devices is how many distinct devices have an interval.
	Devices int `json:"devices"`
	// Running is how many intervals are still open.
	Running int `json:"running"`
	// DeviceHours is the sum of the intervals' lengths, in hours.
	DeviceHours float64 `json:"deviceHours"`
}

// ExposedRevision is one revision matching the query.
type ExposedRevision struct {
	Deployment  string    `json:"deployment"`
	UID         string    `json:"uid"`
	Generation  int64     `json:"generation"`
	RevisionID  string    `json:"revisionId"`
	ScoreDigest string    `json:"scoreDigest"`
	Created     time.Time `json:"created"`
	// Images are the images of the revision's score that match the query
	// (every image when the query names none).
	Images []string `json:"images"`
	// Targets and Canaries count the frozen targets.
	Targets  int `json:"targets"`
	Canaries int `json:"canaries"`
	// Deleted is when the Deployment was deleted (zero: not deleted).
	Deleted time.Time `json:"deleted,omitzero"`
}

// Ends of an exposure interval (ExposureInterval.End).
const (
	// EndRunning: no report of the device ended it.
	EndRunning = "running"
	// EndReplaced: the device reported a newer revision of the Deployment
	// (or a revision of a Deployment recreated under the same name).
	EndReplaced = "replaced"
	// EndRolledBack: the device reported an older revision of the same
	// Deployment UID.
	EndRolledBack = "rolled-back"
	// EndRemoved: the device reported the Deployment Removed.
	EndRemoved = "removed"
)

// Roles of a device in a revision (ExposureInterval.Role).
const (
	RoleCanary = "canary"
	RoleTarget = "target"
	// RoleOther: the device is no frozen target of the revision (handed it
	// by a rollback, or a report the revision does not account for).
	RoleOther = "other"
)

// ExposureInterval is one device's run of one revision: from the stream
// time of its first report of the revision to that of its first report of
// another revision of the Deployment or of the Deployment Removed (ADR
// 0021).
type ExposureInterval struct {
	Device     string `json:"device"`
	Deployment string `json:"deployment"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Role is canary, target or other.
	Role string `json:"role"`
	// Since is when the stream stored the device's first report of the
	// revision (the agent reports Applying before it starts the
	// containers); SinceEvent is that report's id.
	Since      time.Time `json:"since"`
	SinceEvent string    `json:"sinceEvent"`
	// Converged is when the stream stored its first Converged report of
	// the revision in the interval (zero: it never converged).
	Converged time.Time `json:"converged,omitzero"`
	// Until is when the stream stored the report that ended the interval
	// (zero: still running); UntilEvent is its id.
	Until      time.Time `json:"until,omitzero"`
	UntilEvent string    `json:"untilEvent,omitempty"`
	// End is running, replaced, rolled-back or removed; EndGeneration the
	// generation the device reported instead (replaced, rolled-back).
	End           string `json:"end"`
	EndGeneration int64  `json:"endGeneration,omitempty"`
	// LastPhase is the device's last reported phase of the revision in the
	// interval; Failed is set when it reported Failed at least once.
	LastPhase events.WorkloadPhase `json:"lastPhase"`
	Failed    bool                 `json:"failed,omitempty"`
	// Degraded counts the device.workload.degraded reports of the revision
	// within the interval (a crash loop, an OOM kill).
	Degraded int `json:"degraded,omitempty"`
	// Hours is the interval's length (to AsOf when still running).
	Hours float64 `json:"hours"`
}

// exposedRev is a matching revision while reading.
type exposedRev struct {
	ExposedRevision
	namespace, name string
	targets         []string // sorted
	canaries        []string // sorted
}

// exposureKey is one device's Deployment.
type exposureKey struct {
	device, namespace, name string
}

// exposureFold reads the intent and reports streams once: matching
// revisions from the intent, then intervals from the reports. It keeps
// the matching revisions and the devices' open intervals, never the
// records.
type exposureFold struct {
	h       *History
	q       ExposureQuery
	image   imageRef
	revs    map[revKey]*exposedRev
	order   []*exposedRev
	deps    map[events.Keys]bool // Deployments with a matching revision
	deleted map[events.Keys]time.Time
	chunks  events.RevisionAssembler
	open    map[exposureKey]*ExposureInterval
	closed  []ExposureInterval
}

// Exposure answers which devices ran the revisions the query matches, under
// which Deployment and revision, from when to when (ADR 0021). It reads the
// Deployment intent (all, or the one Deployment's) and then the workload and
// health reports stored since the first matching revision, through one
// projections/runner; memory grows with the matching revisions and the
// answer, not with the history.
func (h *History) Exposure(ctx context.Context, q ExposureQuery) (*Exposure, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	f := &exposureFold{h: h, q: q, revs: map[revKey]*exposedRev{}, deps: map[events.Keys]bool{},
		deleted: map[events.Keys]time.Time{}, open: map[exposureKey]*ExposureInterval{}}
	if q.Image != "" {
		f.image, _ = parseImageRef(q.Image)
	}
	intentFilter := filterDeploymentIntent
	if q.Deployment != "" {
		ns, name, _ := strings.Cut(q.Deployment, "/")
		intentFilter, _ = events.DeploymentIntentSubject(ns, name)
	}
	if err := f.read(ctx, runner.Source{Filters: []string{intentFilter}, Until: q.At}, f.intent); err != nil {
		return nil, err
	}
	if len(f.order) == 0 {
		return nil, fmt.Errorf("%w for %s in %s: no revision's score matches (check the reference: a tag, a digest or the repository alone; fleet history deployment <namespace>/<name> lists a Deployment's revisions)",
			ErrNoEvents, q.describe(), events.StreamIntent)
	}
	first := f.order[0].Created
	for _, r := range f.order {
		if r.Created.Before(first) {
			first = r.Created
		}
	}
	src := runner.Source{Filters: []string{filterWorkload, filterHealth}, From: events.FromTime(first), Until: q.At}
	report := f.report
	if ix, ok := h.r.(exposureIndexReader); ok && !h.noIndex {
		w, suspects, err := f.readIndex(ctx, ix, first)
		switch {
		case err != nil:
			// The index is a shortcut: without it, every report.
			h.log.WarnContext(ctx, "history exposure: the exposure index cannot be read; reading every report", "error", err)
			f.resetReports()
		case len(suspects) > maxDeviceReads:
			// One read per device would cost more than one of every
			// report.
			h.log.InfoContext(ctx, "history exposure: too many devices the exposure index cannot answer for; reading every report", "devices", len(suspects))
			f.resetReports()
		case w > 0:
			for _, device := range suspects {
				if err := f.readDevice(ctx, device, first, w); err != nil {
					return nil, err
				}
			}
			src.After = w
			report = func(ctx context.Context, rec events.Record) {
				if !rec.Stored.Before(first) {
					f.report(ctx, rec)
				}
			}
		}
	}
	if err := f.read(ctx, src, report); err != nil {
		return nil, err
	}
	return f.finish(), nil
}

// maxDeviceReads bounds the devices whose own reports a question reads
// beside the exposure index (unindexed, or reporting a revision before it
// was created): past it, the question reads every report instead.
const maxDeviceReads = 256

// describe names what the query looks for, for an error.
func (q ExposureQuery) describe() string {
	var parts []string
	if q.Image != "" {
		parts = append(parts, "image "+q.Image)
	}
	if q.ScoreDigest != "" {
		parts = append(parts, "score digest "+q.ScoreDigest)
	}
	if q.Deployment != "" {
		parts = append(parts, "Deployment "+q.Deployment)
	}
	return strings.Join(parts, ", ")
}

// read replays one source through a projections/runner and hands each
// record to fn; a record that does not decode is skipped and counted.
func (f *exposureFold) read(ctx context.Context, src runner.Source, fn func(context.Context, events.Record)) error {
	rn := &runner.Runner{Name: "history exposure", Reader: f.h.r, Log: f.h.log, Sources: []runner.Source{src}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	in := make(chan runner.Msg, 256)
	go func() {
		defer close(in)
		rn.RunOnce(ctx, in)
	}()
	var failed error
	n := 0
	for m := range in {
		switch {
		case m.Err != nil:
			failed = fmt.Errorf("history: read %s: %w", strings.Join(src.Filters, ","), m.Err)
		case m.Caught:
			f.h.log.DebugContext(ctx, "history read", "filter", strings.Join(src.Filters, ","), "records", n)
		case m.Skip != nil:
			f.h.skips.Skip(ctx, f.h.log, m.Skip)
		default:
			n++
			fn(ctx, m.Record)
		}
	}
	if failed != nil {
		return failed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("history: %w", err)
	}
	return nil
}

// intent folds one Deployment intent record: a revision that matches is
// kept, a deletion noted.
func (f *exposureFold) intent(ctx context.Context, rec events.Record) {
	ev, ok, err := f.chunks.Add(rec.Event)
	if err != nil {
		f.h.skips.Skip(ctx, f.h.log, events.InvalidData(rec, err))
		return
	}
	if !ok {
		return
	}
	keys := events.Keys{Namespace: ev.Keys.Namespace, Name: ev.Keys.Name}
	switch ev.Type {
	case events.TypeDeploymentDeleted:
		if _, ok := f.deleted[keys]; !ok && f.deps[keys] {
			f.deleted[keys] = rec.Stored.UTC()
		}
	case events.TypeDeploymentRevisionCreated:
		d, err := events.Decode[events.DeploymentRevisionCreated](ev)
		if err != nil {
			f.h.skipData(ctx, rec, err)
			return
		}
		if d.Generation > 0 {
			delete(f.deleted, keys) // a Deployment recreated under the same name
		}
		images, ok := f.matches(d)
		k := revKeyOf(d.UID, d.Generation)
		if !ok || f.revs[k] != nil {
			return
		}
		r := &exposedRev{ExposedRevision: ExposedRevision{Deployment: keys.Namespace + "/" + keys.Name, UID: d.UID, Generation: d.Generation,
			RevisionID: d.RevisionID, ScoreDigest: d.ScoreDigest, Created: rec.Stored.UTC(), Images: images,
			Targets: len(sortedSet(d.Targets)), Canaries: len(sortedSet(d.Canaries))},
			namespace: keys.Namespace, name: keys.Name, targets: sortedSet(d.Targets), canaries: sortedSet(d.Canaries)}
		f.revs[k] = r
		f.order = append(f.order, r)
		f.deps[keys] = true
	}
}

// matches reports whether a revision matches the query, and the images of
// its score that do.
func (f *exposureFold) matches(d events.DeploymentRevisionCreated) ([]string, bool) {
	if f.q.ScoreDigest != "" && d.ScoreDigest != f.q.ScoreDigest {
		return nil, false
	}
	var sc score.Score
	if err := json.Unmarshal(d.Score, &sc); err != nil && f.q.Image != "" {
		return nil, false
	}
	var all []string
	if c := sc.Data.InitContainer; c != nil {
		all = append(all, c.Image)
	}
	for _, s := range sc.Data.Services {
		all = append(all, s.Image)
	}
	if f.q.Image == "" {
		return sortedSet(all), true
	}
	var out []string
	for _, img := range all {
		if f.image.matches(img) {
			out = append(out, img)
		}
	}
	return sortedSet(out), len(out) > 0
}

// report folds one workload or health report of a device.
func (f *exposureFold) report(ctx context.Context, rec events.Record) {
	device := rec.Event.Keys.Device
	switch rec.Event.Type {
	case events.TypeWorkloadStatus:
		p := projections.NewStoredPayload(rec)
		d, err := p.WorkloadStatus()
		if err != nil {
			f.h.skipData(ctx, rec, err)
			return
		}
		f.workload(rec, device, d)
	case events.TypeWorkloadDegraded:
		d, err := events.Decode[events.WorkloadHealth](rec.Event)
		if err != nil {
			f.h.skipData(ctx, rec, err)
			return
		}
		if iv := f.open[exposureKey{device, d.Namespace, d.Deployment}]; iv != nil && iv.UID == d.UID && iv.Generation == d.Generation {
			iv.Degraded++
		}
	}
}

// workload moves a device's interval on a report: a report of another
// revision of the Deployment, or of its removal, ends the open one; a
// report of a matching revision opens one.
func (f *exposureFold) workload(rec events.Record, device string, d events.WorkloadStatus) {
	keys := events.Keys{Namespace: d.Namespace, Name: d.Deployment}
	if !f.deps[keys] {
		return
	}
	k := exposureKey{device, d.Namespace, d.Deployment}
	iv := f.open[k]
	same := iv != nil && iv.UID == d.UID && iv.Generation == d.Generation
	if iv != nil && (!same || d.Phase == events.WorkloadRemoved) {
		iv.Until, iv.UntilEvent = rec.Stored.UTC(), rec.Event.ID.String()
		switch {
		case d.Phase == events.WorkloadRemoved:
			iv.End = EndRemoved
		case d.UID == iv.UID && d.Generation < iv.Generation:
			iv.End, iv.EndGeneration = EndRolledBack, d.Generation
		default:
			iv.End, iv.EndGeneration = EndReplaced, d.Generation
		}
		f.closed = append(f.closed, *iv)
		delete(f.open, k)
		iv, same = nil, false
	}
	if d.Phase == events.WorkloadRemoved {
		return
	}
	r := f.revs[revKeyOf(d.UID, d.Generation)]
	if r == nil || r.namespace != d.Namespace || r.name != d.Deployment {
		return
	}
	if iv == nil {
		iv = &ExposureInterval{Device: device, Deployment: r.Deployment, UID: d.UID, Generation: d.Generation, RevisionID: r.RevisionID,
			Role: r.role(device), Since: rec.Stored.UTC(), SinceEvent: rec.Event.ID.String(), End: EndRunning}
		f.open[k] = iv
	}
	iv.LastPhase = d.Phase
	switch d.Phase {
	case events.WorkloadConverged:
		if iv.Converged.IsZero() {
			iv.Converged = rec.Stored.UTC()
		}
	case events.WorkloadFailed:
		iv.Failed = true
	}
}

// role is device's role in the revision.
func (r *exposedRev) role(device string) string {
	if _, ok := slices.BinarySearch(r.canaries, device); ok {
		return RoleCanary
	}
	if _, ok := slices.BinarySearch(r.targets, device); ok {
		return RoleTarget
	}
	return RoleOther
}

// finish measures the intervals and totals them.
func (f *exposureFold) finish() *Exposure {
	asOf := f.q.At
	if asOf.IsZero() {
		asOf = cmp.Or(f.q.Now, time.Now())
	}
	out := &Exposure{Query: f.q, AsOf: asOf.UTC(), Revisions: make([]ExposedRevision, 0, len(f.order)),
		Intervals: append(make([]ExposureInterval, 0, len(f.closed)+len(f.open)), f.closed...)}
	for _, r := range f.order {
		rv := r.ExposedRevision
		rv.Deleted = f.deleted[events.Keys{Namespace: r.namespace, Name: r.name}]
		out.Revisions = append(out.Revisions, rv)
	}
	for _, iv := range f.open {
		out.Intervals = append(out.Intervals, *iv)
	}
	slices.SortFunc(out.Intervals, func(a, b ExposureInterval) int {
		return cmp.Or(cmp.Compare(a.Device, b.Device), a.Since.Compare(b.Since), cmp.Compare(a.Deployment, b.Deployment),
			cmp.Compare(a.Generation, b.Generation), cmp.Compare(a.SinceEvent, b.SinceEvent), cmp.Compare(a.UID, b.UID))
	})
	var devices int
	for i := range out.Intervals {
		iv := &out.Intervals[i]
		end := iv.Until
		if iv.End == EndRunning {
			end = out.AsOf
			out.Running++
		}
		iv.Hours = max(end.Sub(iv.Since).Hours(), 0)
		out.DeviceHours += iv.Hours
		if i == 0 || out.Intervals[i-1].Device != iv.Device {
			devices++
		}
	}
	out.Devices = devices
	return out
}

func (e *Exposure) writeText(w io.Writer) error {
	line(w, "Exposure: %s", e.Query.describe())
	line(w, "%d devices, %d intervals (%d running), %.1f device-hours as of %s", e.Devices, len(e.Intervals), e.Running, e.DeviceHours, timeText(e.AsOf))
	fmt.Fprintln(w, "\nREVISIONS")
	t := newTable(w, "DEPLOYMENT", "GEN", "REVISION", "CREATED", "TARGETS", "CANARIES", "SCORE", "IMAGES", "DELETED")
	for _, r := range e.Revisions {
		t.row(r.Deployment, fmt.Sprint(r.Generation), r.RevisionID, timeText(r.Created), fmt.Sprint(r.Targets), fmt.Sprint(r.Canaries),
			dash(r.ScoreDigest), dash(strings.Join(r.Images, ",")), timeText(r.Deleted))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDEVICES (from the first report of the revision to the report that ended it)")
	t = newTable(w, "DEVICE", "DEPLOYMENT", "GEN", "ROLE", "SINCE", "CONVERGED", "UNTIL", "END", "LAST PHASE", "DEGRADED", "HOURS")
	for _, iv := range e.Intervals {
		end := iv.End
		if iv.EndGeneration != 0 {
			end = fmt.Sprintf("%s (generation %d)", iv.End, iv.EndGeneration)
		}
		phase := string(iv.LastPhase)
		if iv.Failed && iv.LastPhase != events.WorkloadFailed {
			phase += " (failed before)"
		}
		t.row(iv.Device, iv.Deployment, fmt.Sprint(iv.Generation), iv.Role, timeText(iv.Since), timeText(iv.Converged), timeText(iv.Until),
			end, phase, fmt.Sprint(iv.Degraded), fmt.Sprintf("%.2f", iv.Hours))
	}
	return t.flush()
}
