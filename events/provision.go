package events

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ProvisionOptions are the parameters of the stream and bucket configuration.
// Everything else is fixed by the contract (see docs/events.md, "Streams").
type ProvisionOptions struct {
	// Replicas of every stream and bucket: 1 on one server, 3 on a cluster.
	// Default 1.
	Replicas int
	// DuplicateWindow is how long a Nats-Msg-Id is remembered for dedup: a
	// retried append within it is stored once. Default 2 minutes.
	DuplicateWindow time.Duration
	// HistoryMaxBytes caps each history stream (intent, rollout, reports,
	// commands). Default -1: unlimited. Intent and rollout refuse new writes
	// when full (discard new) rather than drop history.
	HistoryMaxBytes int64
	// ReportsMaxAge bounds the reports and commands streams by age. Default 0:
	// kept forever.
	ReportsMaxAge time.Duration
	// TelemetryPerSubject is how many heartbeats and inventories are kept per
	// device. Default 5.
	TelemetryPerSubject int64
	// ReportsPerSubject is how many workload, task and command reports are
	// kept per device and kind: the oldest of that device's own history goes
	// first. It bounds what one flooding device can add to the reports
	// stream (at most this many messages of its own per kind) and to the
	// rollout runner's backlog (a message discarded before the runner reads
	// it is never read). Default DefaultReportsPerSubject; -1: unlimited.
	ReportsPerSubject int64
}

// Defaults for ProvisionOptions.
const (
	DefaultDuplicateWindow     = 2 * time.Minute
	DefaultTelemetryPerSubject = 5
	// DefaultReportsPerSubject is ProvisionOptions.ReportsPerSubject's
	// default: about 3,000 rollouts of a device's workloads (a rollout
	// costs a device two or three reports per Deployment).
	DefaultReportsPerSubject = 10000
	// MaxEventSize is the largest event payload a stream accepts (the NATS
	// default max_payload). A frozen target list that would exceed it is
	// split into TypeDeploymentRevisionTargets chunks.
	MaxEventSize = 1 << 20
	// MaxReportSize is the largest message the streams devices write
	// (reports and telemetry) store, headers included: a larger one is
	// refused and stored nowhere. It is half the device account's
	// max_payload (authcallout.DeviceMaxPayload, 128 KiB) and well over
	// the largest report the agent builds (a task status: 16 KiB of
	// output, 4 KiB of error and the package changes that fit; the agent
	// fits every report under MaxReportData). With ReportsPerSubject and
	// TelemetryPerSubject it bounds the bytes one device can hold
	// (docs/security.md, "What one device can cost").
	MaxReportSize = 64 << 10
	// MaxReportData is the largest envelope the agent publishes as a
	// report: MaxReportSize less room for the headers.
	MaxReportData = MaxReportSize - 4096
	// MaxReportError is the longest error text the agent puts in a report
	// (workload, task, command); a longer one is cut and ends in "…".
	MaxReportError = 4096
)

func (o ProvisionOptions) withDefaults() ProvisionOptions {
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.DuplicateWindow == 0 {
		o.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.HistoryMaxBytes == 0 {
		o.HistoryMaxBytes = -1
	}
	if o.TelemetryPerSubject == 0 {
		o.TelemetryPerSubject = DefaultTelemetryPerSubject
	}
	if o.ReportsPerSubject == 0 {
		o.ReportsPerSubject = DefaultReportsPerSubject
	}
	return o
}

// Validate checks the options.
func (o ProvisionOptions) Validate() error {
	o = o.withDefaults()
	var errs []error
	if o.Replicas < 1 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas is %d: use 1 (one server) to 5; 3 on a cluster", o.Replicas))
	}
	if o.DuplicateWindow < 0 {
		errs = append(errs, fmt.Errorf("duplicate window is %s: must be positive", o.DuplicateWindow))
	}
	if o.ReportsMaxAge < 0 {
		errs = append(errs, fmt.Errorf("reports max age is %s: use 0 (forever) or a positive duration", o.ReportsMaxAge))
	}
	if o.ReportsMaxAge > 0 && o.ReportsMaxAge < o.DuplicateWindow {
		errs = append(errs, fmt.Errorf("reports max age %s is shorter than the duplicate window %s: raise it", o.ReportsMaxAge, o.DuplicateWindow))
	}
	if o.ReportsPerSubject < -1 {
		errs = append(errs, fmt.Errorf("reports per subject is %d: use -1 (unlimited) or a positive count", o.ReportsPerSubject))
	}
	if o.TelemetryPerSubject < 1 {
		errs = append(errs, fmt.Errorf("telemetry per subject is %d: keep at least 1", o.TelemetryPerSubject))
	}
	return errors.Join(errs...)
}

// StreamConfigs returns the configuration of every Fleet stream.
func StreamConfigs(o ProvisionOptions) []jetstream.StreamConfig {
	o = o.withDefaults()
	history := func(name, desc string, subjects []string, maxAge time.Duration, discard jetstream.DiscardPolicy) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:              name,
			Description:       desc,
			Subjects:          subjects,
			Retention:         jetstream.LimitsPolicy,
			MaxConsumers:      -1,
			MaxMsgs:           -1,
			MaxBytes:          o.HistoryMaxBytes,
			MaxAge:            maxAge,
			MaxMsgsPerSubject: -1,
			MaxMsgSize:        MaxEventSize,
			Discard:           discard,
			Storage:           jetstream.FileStorage,
			Replicas:          o.Replicas,
			Duplicates:        o.DuplicateWindow,
			DenyDelete:        true,
			DenyPurge:         true,
			AllowDirect:       true,
		}
	}
	// Device reports are stored before they are flushed (async persist
	// mode) on one server: agents re-report their current state on every
	// reconnect, so a power loss costs at most the last moments of report
	// history, never a decision. JetStream refuses async persist on a
	// replicated stream (err_code 10052): with Replicas > 1 they use the
	// default mode, and replication is what protects them (ADR 0002,
	// "Addendum: R3"). Intent, rollout and commands are fsynced before the ack when
	// the server syncs always (ADR 0002). The two streams devices write
	// never acknowledge (NoAck): reports arrive from the device account
	// through a stream import with whatever reply subject the device chose,
	// and an acknowledgement would be a message the device aims inside this
	// account (ADR 0006). Agents publish reports without expecting one.
	reports := history(StreamReports, "Fleet device reports kept as history: workload and task status, command results",
		[]string{"fleet.report.*.workload", "fleet.report.*.task", "fleet.report.*.command", "fleet.report.*.health", "fleet.report.*.fetch"}, o.ReportsMaxAge, jetstream.DiscardOld)
	if o.Replicas == 1 {
		reports.PersistMode = jetstream.AsyncPersistMode
	}
	reports.MaxMsgsPerSubject = o.ReportsPerSubject
	reports.MaxMsgSize = MaxReportSize
	reports.NoAck = true
	telemetry := history(StreamTelemetry, "Fleet device inventory and container state: the last few per device",
		[]string{"fleet.report.*.inventory", "fleet.report.*.containers"}, 0, jetstream.DiscardOld)
	telemetry.MaxMsgsPerSubject = o.TelemetryPerSubject
	telemetry.MaxMsgSize = MaxReportSize
	telemetry.MaxBytes = -1
	telemetry.DenyDelete, telemetry.DenyPurge = false, false
	if o.Replicas == 1 {
		telemetry.PersistMode = jetstream.AsyncPersistMode
	}
	telemetry.NoAck = true
	// Heartbeats are soft state (ADR 0024): the last one per device, in
	// memory (no fsync, no disk write per beat, on any replica), replicated
	// like the rest so that a server loss keeps them. A full cluster
	// restart empties it; every agent beats again within its interval.
	liveness := history(StreamLiveness, "Fleet device heartbeats: the last one per device, in memory (soft state)",
		[]string{"fleet.report.*.heartbeat"}, 0, jetstream.DiscardOld)
	liveness.Storage = jetstream.MemoryStorage
	liveness.MaxMsgsPerSubject = 1
	liveness.MaxMsgSize = MaxReportSize
	liveness.MaxBytes = -1
	liveness.DenyDelete, liveness.DenyPurge = false, false
	liveness.NoAck = true
	// The operator's exposure index (ADR 0033): derived from the reports,
	// appended by one writer, refused rather than dropped when full (a
	// dropped record would make answers wrong; a full index only makes a
	// question read more reports). Deleting the stream rebuilds it.
	index := history(StreamIndex, "Fleet exposure index: what fleet history exposure needs of the reports, per revision (derived, rebuildable)",
		[]string{ExposureIndexSubjects}, 0, jetstream.DiscardNew)
	// A record carries fields of its report (a device's phase text
	// included), re-encoded: the writer writes none over
	// MaxExposureIndexMessage (it marks the device unindexed instead), and
	// the stream refuses a larger one.
	index.MaxMsgSize = MaxExposureIndexMessage
	return []jetstream.StreamConfig{
		history(StreamIntent, "Fleet intent: Deployment and TaskRun revisions and deletions (append-only history)",
			[]string{"fleet.intent.deployment.*.*", "fleet.intent.taskrun.*.*"}, 0, jetstream.DiscardNew),
		history(StreamRollout, "Fleet rollout transitions per Deployment (append-only history)",
			[]string{"fleet.rollout.deployment.*.*"}, 0, jetstream.DiscardNew),
		reports,
		// Telemetry before liveness: an older FLEET_TELEMETRY releases
		// the heartbeat subjects before FLEET_LIVENESS takes them.
		telemetry,
		liveness,
		history(StreamCommands, "Fleet agent commands (audit trail)",
			[]string{"fleet.command.*"}, o.ReportsMaxAge, jetstream.DiscardOld),
		history(StreamAudit, "Fleet dashboard actions and alert acknowledgements, each naming the user (append-only history)",
			[]string{"fleet.dashboard.device.*", "fleet.dashboard.alert.*"}, 0, jetstream.DiscardNew),
		index,
	}
}

// KeyValueConfigs returns the configuration of every Fleet KV bucket.
func KeyValueConfigs(o ProvisionOptions) []jetstream.KeyValueConfig {
	o = o.withDefaults()
	return []jetstream.KeyValueConfig{
		{
			Bucket:       BucketIntent,
			Description:  "Fleet per-device desired state (projection of FLEET_INTENT and FLEET_ROLLOUT); one key per device",
			History:      1,
			MaxValueSize: MaxEventSize,
			Storage:      jetstream.FileStorage,
			Replicas:     o.Replicas,
			// Each value, once stored, goes to its device's
			// IntentNotifySubject with the stream's headers.
			RePublish: &jetstream.RePublish{Source: "$KV." + BucketIntent + ".>", Destination: rootIntentNotify + ".>"},
		},
		{
			Bucket:       BucketIdentity,
			Description:  "Fleet identity subject → device id and quarantine flag (projection of Device CRs)",
			History:      1,
			MaxValueSize: 4096,
			Storage:      jetstream.FileStorage,
			Replicas:     o.Replicas,
		},
	}
}

// Provision creates or updates every Fleet stream and KV bucket so that its
// configuration is the contract's. It is idempotent. It never silently keeps
// a wrong configuration: a field the server refuses to change (storage type,
// for one) or clamps is an error naming the stream, the field and both
// values.
func Provision(ctx context.Context, js jetstream.JetStream, o ProvisionOptions) error {
	if err := o.Validate(); err != nil {
		return fmt.Errorf("provision options: %w", err)
	}
	js = placementRetrying{js}
	for _, want := range StreamConfigs(o) {
		s, err := js.CreateOrUpdateStream(ctx, want)
		if err != nil {
			return fmt.Errorf("provision stream %s: %w", want.Name, err)
		}
		if err := compareStream(want, s.CachedInfo().Config); err != nil {
			return err
		}
	}
	if _, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      BucketOperatorState,
		Description: "Fleet operator state (rollout runner checkpoint); derived, rebuildable from the streams",
		Storage:     jetstream.FileStorage,
		Replicas:    o.withDefaults().Replicas,
	}); err != nil {
		return fmt.Errorf("provision object store %s: %w", BucketOperatorState, err)
	}
	for _, want := range KeyValueConfigs(o) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, want); err != nil {
			return fmt.Errorf("provision KV bucket %s: %w", want.Bucket, err)
		}
		s, err := js.Stream(ctx, "KV_"+want.Bucket)
		if err != nil {
			return fmt.Errorf("provision KV bucket %s: read back: %w", want.Bucket, err)
		}
		got := s.CachedInfo().Config
		if want.Bucket == BucketIntent {
			if got, err = allowAtomic(ctx, js, got); err != nil {
				return err
			}
		}
		exp := got
		exp.MaxMsgsPerSubject = int64(want.History)
		exp.MaxMsgSize = want.MaxValueSize
		exp.Storage = want.Storage
		exp.Replicas = want.Replicas
		exp.AllowDirect = true
		if err := compareStream(exp, got); err != nil {
			return err
		}
		if w, g := want.RePublish, got.RePublish; w != nil && (g == nil || *g != *w) {
			return fmt.Errorf("%w: stream KV_%s field republish is %+v, the contract says %+v; fix or recreate the bucket",
				ErrConfigMismatch, want.Bucket, g, *w)
		}
	}
	return nil
}

// allowAtomicAttempts bounds how often Provision turns atomic publish on
// again when another provisioner's bucket update turned it off meanwhile.
const allowAtomicAttempts = 10

// allowAtomic makes the fleet-intent bucket's stream (cfg, as read) allow
// atomic batch publish, and returns its configuration. The rollout runner
// writes fleet-intent in atomic batches (ADR 0011); a bucket's
// configuration has no such field, and every update of the bucket turns it
// off. Operators starting together each update the bucket and then turn it
// on, so one may read it off between another's two updates: it is turned on
// and read again until it stays on. Only a server that never keeps it on
// (older than 2.12) is an error.
func allowAtomic(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.StreamConfig, error) {
	for range allowAtomicAttempts {
		if cfg.AllowAtomicPublish {
			return cfg, nil
		}
		cfg.AllowAtomicPublish = true
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return cfg, fmt.Errorf("provision KV bucket %s: allow atomic batch publish: %w", BucketIntent, err)
		}
		s, err := js.Stream(ctx, "KV_"+BucketIntent)
		if err != nil {
			return cfg, fmt.Errorf("provision KV bucket %s: read back: %w", BucketIntent, err)
		}
		cfg = s.CachedInfo().Config
	}
	if cfg.AllowAtomicPublish {
		return cfg, nil
	}
	return cfg, fmt.Errorf("%w: stream KV_%s field allow_atomic is false after %d updates setting it, the contract says true (a server older than 2.12?); upgrade the server",
		ErrConfigMismatch, BucketIntent, allowAtomicAttempts)
}

// compareStream checks the fields the contract sets.
func compareStream(want, got jetstream.StreamConfig) error {
	var errs []error
	check := func(field string, w, g any, equal bool) {
		if !equal {
			errs = append(errs, fmt.Errorf("%w: stream %s field %s is %v, the contract says %v; fix or recreate the stream",
				ErrConfigMismatch, want.Name, field, g, w))
		}
	}
	check("subjects", want.Subjects, got.Subjects, slices.Equal(want.Subjects, got.Subjects))
	check("retention", want.Retention, got.Retention, want.Retention == got.Retention)
	check("storage", want.Storage, got.Storage, want.Storage == got.Storage)
	check("replicas", want.Replicas, got.Replicas, want.Replicas == got.Replicas)
	check("max_msgs", want.MaxMsgs, got.MaxMsgs, want.MaxMsgs == got.MaxMsgs)
	check("max_bytes", want.MaxBytes, got.MaxBytes, want.MaxBytes == got.MaxBytes)
	check("max_age", want.MaxAge, got.MaxAge, want.MaxAge == got.MaxAge)
	check("max_msgs_per_subject", want.MaxMsgsPerSubject, got.MaxMsgsPerSubject, want.MaxMsgsPerSubject == got.MaxMsgsPerSubject)
	check("max_msg_size", want.MaxMsgSize, got.MaxMsgSize, want.MaxMsgSize == got.MaxMsgSize)
	check("discard", want.Discard, got.Discard, want.Discard == got.Discard)
	check("duplicate_window", want.Duplicates, got.Duplicates, want.Duplicates == got.Duplicates)
	check("deny_delete", want.DenyDelete, got.DenyDelete, want.DenyDelete == got.DenyDelete)
	check("deny_purge", want.DenyPurge, got.DenyPurge, want.DenyPurge == got.DenyPurge)
	check("persist_mode", want.PersistMode, got.PersistMode, want.PersistMode == got.PersistMode)
	check("allow_direct", want.AllowDirect, got.AllowDirect, want.AllowDirect == got.AllowDirect)
	return errors.Join(errs...)
}

// placementWait bounds how long Provision retries a create the cluster
// refused for want of peers to place the replicas on (a server restarting
// or stalled a moment: JetStream error 10005, "no suitable peers for
// placement"); placementRetry is the wait between two tries.
const (
	placementWait  = 30 * time.Second
	placementRetry = 500 * time.Millisecond
)

// errCodeNoPeers is JetStream's "no suitable peers for placement".
const errCodeNoPeers jetstream.ErrorCode = 10005

// placementRetrying retries the creates Provision makes while the cluster
// has too few peers online to place them, for up to placementWait.
type placementRetrying struct{ jetstream.JetStream }

func (p placementRetrying) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	return retryPlacement(ctx, func() (jetstream.Stream, error) { return p.JetStream.CreateOrUpdateStream(ctx, cfg) })
}

func (p placementRetrying) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	return retryPlacement(ctx, func() (jetstream.ObjectStore, error) { return p.JetStream.CreateOrUpdateObjectStore(ctx, cfg) })
}

func (p placementRetrying) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	return retryPlacement(ctx, func() (jetstream.KeyValue, error) { return p.JetStream.CreateOrUpdateKeyValue(ctx, cfg) })
}

// retryPlacement calls f until it returns anything but a placement
// refusal, placementWait passes or ctx ends; it returns f's last result.
func retryPlacement[T any](ctx context.Context, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(placementWait)
	for {
		v, err := f()
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoPeers || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-ctx.Done():
			return v, err
		case <-time.After(placementRetry):
		}
	}
}
