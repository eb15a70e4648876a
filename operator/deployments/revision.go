package deployments

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
	"github.com/nationtech/harmony-fleet/score"
)

// ScoreDigest is the sha256 of the score's canonical JSON (field order is
// fixed by the Go types, so the encoding is stable).
func ScoreDigest(s score.Score) (string, json.RawMessage, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return "", nil, fmt.Errorf("encode score: %w", err)
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:]), raw, nil
}

// RevisionID names a revision for humans: the generation and the first
// digits of the score digest.
func RevisionID(generation int64, scoreDigest string) string {
	d := scoreDigest
	if len(d) > len("sha256:")+8 {
		d = d[len("sha256:") : len("sha256:")+8]
	}
	return fmt.Sprintf("%d-%s", generation, d)
}

// revisionChunkBytes is the most id bytes a target chunk carries: 0 is
// events.ChunkBytes (tests set less, to chunk a handful of devices).
var revisionChunkBytes = 0

// SetRevisionChunkBytes makes revisions chunk their targets past n id bytes
// until the returned restore is called (0: the default). It is a test hook:
// not safe for concurrent use with the controllers.
func SetRevisionChunkBytes(n int) (restore func()) {
	old := revisionChunkBytes
	revisionChunkBytes = n
	return func() { revisionChunkBytes = old }
}

// RevisionEvents builds the events of a Deployment generation's revision:
// its deployment.revision.targets chunks when the frozen target list does
// not fit in one event, then the deployment.revision.created event (last:
// readers assemble a revision only when it comes). data is the revision
// with its complete lists, and the resolution's frozen plan with its
// targets' batches (none without a plan: the bytes are as before). stamp,
// when set, is applied last to each event (Options.EventStamp, tests only).
func RevisionEvents(d *fleetv1.Deployment, r targets.Resolution, stamp ...events.Option) (evs []events.Event, data events.DeploymentRevisionCreated, err error) {
	digest, raw, err := ScoreDigest(d.Spec.Score)
	if err != nil {
		return nil, data, err
	}
	data = events.DeploymentRevisionCreated{
		UID: string(d.UID), Generation: d.Generation, RevisionID: RevisionID(d.Generation, digest),
		ScoreDigest: digest, Score: raw, Targets: nonNil(r.Targets), Canaries: nonNil(r.Canaries),
		Plan: r.Plan, TargetBatches: r.TargetBatches, TargetGroups: r.TargetGroups,
	}
	if pd := d.Spec.Rollout.ProgressDeadline; pd != nil && pd.Duration > 0 {
		// Frozen only when set, so a revision without one has the bytes
		// of before.
		data.ProgressDeadlineSeconds = int64(max(pd.Duration.Round(time.Second), time.Second) / time.Second)
	}
	if mr := d.Spec.Rollout.MinReady; mr != nil && mr.Duration > 0 {
		// Likewise: 0s and absent are today's Converged, and the bytes of
		// before (ADR 0019).
		data.MinReadySeconds = int64(max(mr.Duration.Round(time.Second), time.Second) / time.Second)
	}
	// Frozen only when set: a revision without prefetch has the bytes of
	// before (ADR 0027).
	data.Prefetch = d.Spec.Rollout.Prefetch
	if data.Signatures, err = frozenSignatures(d); err != nil {
		return nil, data, err
	}
	// Likewise: a revision without windows has the bytes of before (ADR
	// 0029).
	if data.Window, data.FetchWindow, err = frozenWindows(d.Spec.Rollout); err != nil {
		return nil, data, fmt.Errorf("revision of %s/%s: %w", d.Namespace, d.Name, err)
	}
	// Likewise: Frozen and absent are today's rollout, and its bytes (ADR
	// 0026).
	data.Follow = d.Spec.Rollout.Targets == fleetv1.RolloutTargetsFollow
	if err := data.CheckPlan(); err != nil {
		// A resolution bug: readers would refuse this revision.
		return nil, data, fmt.Errorf("revision of %s/%s: %w", d.Namespace, d.Name, err)
	}
	keys := events.Keys{Namespace: d.Namespace, Name: d.Name}
	opts := []events.Option{events.WithCorrelation(string(d.UID), d.Generation)}
	for _, s := range stamp {
		opts = intent.Stamped(s, opts...)
	}
	created, chunks := events.ChunkRevision(data, revisionChunkBytes)
	for _, c := range chunks {
		ev, err := events.New(keys, c, opts...)
		if err != nil {
			return nil, data, err
		}
		evs = append(evs, ev)
	}
	ev, err := events.New(keys, created, opts...)
	if err != nil {
		return nil, data, err
	}
	if b, err := ev.Marshal(); err == nil && len(b) > events.MaxEventSize-4096 {
		// Only a score near 1 MiB gets here (the targets are in chunks):
		// refuse loudly rather than truncate.
		return nil, data, fmt.Errorf("revision %s of %s/%s does not fit in one event (%d bytes): the score is too large",
			data.RevisionID, d.Namespace, d.Name, len(b))
	}
	return append(evs, ev), data, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// frozenWindows returns the rollout's switch and fetch windows as the
// revision freezes them (nil when unset), checked as the CRD checks them:
// a Deployment stored before the CRD had the rules freezes nothing.
func frozenWindows(ro fleetv1.RolloutSpec) (window, fetch *events.MaintenanceWindow, err error) {
	if w := ro.MaintenanceWindow; w != nil {
		window = &events.MaintenanceWindow{Start: w.Start, Duration: w.Duration}
		if err := window.Validate(); err != nil {
			return nil, nil, fmt.Errorf("spec.rollout.maintenanceWindow: %w", err)
		}
	}
	if w := ro.FetchWindow; w != nil {
		if !ro.Prefetch {
			return nil, nil, errors.New("spec.rollout.fetchWindow needs spec.rollout.prefetch: true (without prefetch a device pulls the images when it switches, inside spec.rollout.maintenanceWindow): set prefetch, or remove fetchWindow")
		}
		fetch = &events.MaintenanceWindow{Start: w.Start, Duration: w.Duration}
		if err := fetch.Validate(); err != nil {
			return nil, nil, fmt.Errorf("spec.rollout.fetchWindow: %w", err)
		}
	}
	return window, fetch, nil
}
