package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The exposure index (ADR 0033) is a projection the operator keeps in its
// own append-only stream, StreamIndex: per device and Deployment revision,
// what `fleet history exposure` needs of the device's workload and health
// reports, on the revision's own subject, so that a question about one
// revision reads only that revision's records (the server filters by
// subject). It is derived: deleting the stream loses nothing, the
// operator refills it from the reports.

// StreamIndex holds the operator's indexes of the reports: derived,
// rebuildable from StreamReports (ADR 0033).
const StreamIndex = "FLEET_INDEX"

// ExposureIndexSubjects is the subject filter of every record of the
// exposure index: the revisions' records,
// fleet.index.exposure.<namespace>.<name>.<generation>.<device>, and the
// devices' unindexed markers, fleet.index.exposure.unindexed.<device>
// (ExposureUnindexedFilter).
const ExposureIndexSubjects = "fleet.index.exposure.>"

// ExposureUnindexedFilter is the subject filter of the unindexed markers:
// fleet.index.exposure.unindexed.<device>, one per device at most (a
// subject of a different token count than a revision's, so no Deployment
// name can take it).
const ExposureUnindexedFilter = "fleet.index.exposure.unindexed.*"

// ExposureUnindexedSubject is the subject of device's unindexed marker.
func ExposureUnindexedSubject(device string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return strings.TrimSuffix(ExposureUnindexedFilter, "*") + device, nil
}

// MaxExposureIndexMessage bounds one exposure index message, its subject
// and JSON record together: the writer writes no larger record, it marks
// the device unindexed instead (a real record is about 200 bytes; only a
// phase text a device chose can make one larger).
const MaxExposureIndexMessage = 1024

// ExposureIndexSubject is the subject of one device's records of one
// Deployment revision: fleet.index.exposure.<namespace>.<name>.<generation>.<device>.
// Every token is validated: a name a device reports is data, and one that
// is no token is refused here, never sent.
func ExposureIndexSubject(namespace, name string, generation int64, device string) (string, error) {
	f, err := ExposureIndexFilter(namespace, name, generation)
	if err != nil {
		return "", err
	}
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return strings.TrimSuffix(f, "*") + device, nil
}

// ExposureIndexFilter is the subject filter of every device's records of
// one Deployment revision: fleet.index.exposure.<namespace>.<name>.<generation>.*.
func ExposureIndexFilter(namespace, name string, generation int64) (string, error) {
	if err := ValidateToken(TokenNamespace, namespace); err != nil {
		return "", err
	}
	if err := ValidateToken(TokenName, name); err != nil {
		return "", err
	}
	return "fleet.index.exposure." + namespace + "." + name + "." + strconv.FormatInt(generation, 10) + ".*", nil
}

// ExposureIndexKey is what an exposure index subject names.
type ExposureIndexKey struct {
	Namespace, Name string
	Generation      int64
	Device          string
}

// ParseExposureIndexSubject reads an exposure index subject back,
// validating every token; an unindexed marker's key names only its
// device.
func ParseExposureIndexSubject(subject string) (ExposureIndexKey, error) {
	t := strings.Split(subject, ".")
	if len(t) == 5 && t[0] == "fleet" && t[1] == "index" && t[2] == "exposure" && t[3] == "unindexed" {
		if s, err := ExposureUnindexedSubject(t[4]); err != nil || s != subject {
			return ExposureIndexKey{}, fmt.Errorf("%w %q: %w", ErrInvalidSubject, subject, err)
		}
		return ExposureIndexKey{Device: t[4]}, nil
	}
	if len(t) != 7 || t[0] != "fleet" || t[1] != "index" || t[2] != "exposure" {
		return ExposureIndexKey{}, fmt.Errorf("%w %q: not fleet.index.exposure.<namespace>.<name>.<generation>.<device>", ErrInvalidSubject, subject)
	}
	g, err := strconv.ParseInt(t[5], 10, 64)
	if err != nil {
		return ExposureIndexKey{}, fmt.Errorf("%w %q: generation %q is not a number", ErrInvalidSubject, subject, t[5])
	}
	k := ExposureIndexKey{Namespace: t[3], Name: t[4], Generation: g, Device: t[6]}
	if s, err := ExposureIndexSubject(k.Namespace, k.Name, k.Generation, k.Device); err != nil || s != subject {
		return ExposureIndexKey{}, fmt.Errorf("%w %q: %w", ErrInvalidSubject, subject, err)
	}
	return k, nil
}

// ExposureIndexKind says what an exposure index record records.
type ExposureIndexKind string

// Kinds of exposure index records.
const (
	// ExposureOpened: the device's first report of the revision (after
	// another revision, the Deployment removed, or nothing).
	ExposureOpened ExposureIndexKind = "opened"
	// ExposurePhase: a report of the revision in another phase than the
	// one before it (identical reports are not recorded).
	ExposurePhase ExposureIndexKind = "phase"
	// ExposureDegraded: a device.workload.degraded report of the revision
	// while it runs.
	ExposureDegraded ExposureIndexKind = "degraded"
	// ExposureEnded: the device's first report naming another revision of
	// the Deployment, or the phase Removed; on the ended revision's
	// subject.
	ExposureEnded ExposureIndexKind = "ended"
	// ExposureUnindexed: the device's marker (ADR 0033, "Addendum: a
	// bound per device"), on ExposureUnindexedSubject: from this report
	// on, nothing more of the device is indexed, and a question reads the
	// device's own reports instead of its records. Reason says why.
	ExposureUnindexed ExposureIndexKind = "unindexed"
)

// Reasons of an unindexed marker (ExposureIndexRecord.Reason).
const (
	// UnindexedUnknownRevision: the device reported a revision no
	// Deployment intent held when the writer folded the report (a
	// revision of nothing, or one created later).
	UnindexedUnknownRevision = "unknown-revision"
	// UnindexedLimit: the device's records reached the writer's
	// per-device limit.
	UnindexedLimit = "limit"
	// UnindexedTooLarge: a record would exceed MaxExposureIndexMessage.
	UnindexedTooLarge = "too-large"
)

// ExposureIndexRecord is one record of the exposure index, the JSON
// payload of a StreamIndex message (docs/events.md, "The exposure index").
type ExposureIndexRecord struct {
	Kind ExposureIndexKind `json:"kind"`
	// Source is the FLEET_REPORTS sequence of the report it comes from;
	// Stored that report's stream time.
	Source uint64    `json:"source"`
	Stored time.Time `json:"stored"`
	// Last is set on the last record a report produced: the index covers
	// every report up to Source.
	Last bool `json:"last,omitempty"`
	// UID is the Deployment UID of the revision the subject names.
	UID string `json:"uid"`
	// Event is the report's event id (opened, ended).
	Event string `json:"event,omitempty"`
	// Phase is the phase reported (opened, phase).
	Phase WorkloadPhase `json:"phase,omitempty"`
	// End is how the interval ended (ended): replaced, rolled-back or
	// removed; EndGeneration the generation reported instead.
	End           string `json:"end,omitempty"`
	EndGeneration int64  `json:"endGeneration,omitempty"`
	// Reason is why the device is unindexed (unindexed): unknown-revision,
	// limit or too-large.
	Reason string `json:"reason,omitempty"`
}

// IndexRecord is an exposure index record as stored.
type IndexRecord struct {
	Subject  string
	Key      ExposureIndexKey
	Sequence uint64
	Record   ExposureIndexRecord
}

// IndexWrite is one record to append to the exposure index.
type IndexWrite struct {
	Subject string
	Record  ExposureIndexRecord
}

// ErrIndexConflict is an index append that found the stream's last
// sequence not where the writer expected it: another writer appended
// (a leader failover), or the stream was deleted. The writer reads the
// index again and resumes after its last record.
var ErrIndexConflict = errors.New("the exposure index moved under its writer")

// IndexLast returns the last record of the exposure index; ErrNotFound
// when the stream is empty or does not exist.
func (s *Store) IndexLast(ctx context.Context) (IndexRecord, error) {
	str, err := s.js.Stream(ctx, StreamIndex)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// A server provisioned before the index, or the stream deleted to
		// rebuild it: no index yet.
		return IndexRecord{}, fmt.Errorf("%w: no stream %s", ErrNotFound, StreamIndex)
	}
	if err != nil {
		return IndexRecord{}, fmt.Errorf("exposure index: %w", err)
	}
	last := str.CachedInfo().State.LastSeq
	if last == 0 || str.CachedInfo().State.Msgs == 0 {
		return IndexRecord{}, fmt.Errorf("%w: the exposure index is empty", ErrNotFound)
	}
	m, err := str.GetMsg(ctx, last)
	if err != nil {
		return IndexRecord{}, fmt.Errorf("exposure index: last record %d: %w", last, err)
	}
	return decodeIndex(m.Subject, m.Sequence, m.Data)
}

// IndexLastSequence is the stream sequence of the exposure index's last
// record (0: empty).
func (s *Store) IndexLastSequence(ctx context.Context) (uint64, error) {
	str, err := s.js.Stream(ctx, StreamIndex)
	if err != nil {
		return 0, fmt.Errorf("exposure index: %w", err)
	}
	return str.CachedInfo().State.LastSeq, nil
}

func decodeIndex(subject string, seq uint64, data []byte) (IndexRecord, error) {
	k, err := ParseExposureIndexSubject(subject)
	if err != nil {
		return IndexRecord{}, fmt.Errorf("%w: exposure index record %d: %w", ErrUndecodable, seq, err)
	}
	var r ExposureIndexRecord
	if err := json.Unmarshal(data, &r); err != nil {
		return IndexRecord{}, fmt.Errorf("%w: exposure index record %d on %s: %w", ErrUndecodable, seq, subject, err)
	}
	return IndexRecord{Subject: subject, Key: k, Sequence: seq, Record: r}, nil
}

// ReplayIndex yields, in stream order, the exposure index records on the
// given filters (one per revision) from stream sequence after+1 up to and
// including upTo, by one ordered consumer: the server sends only the
// subjects asked for. A record that does not decode ends the read with an
// error wrapping ErrUndecodable: the index is the operator's own, a reader
// falls back to the reports.
func (s *Store) ReplayIndex(ctx context.Context, filters []string, after, upTo uint64) iter.Seq2[IndexRecord, error] {
	return func(yield func(IndexRecord, error) bool) {
		if upTo <= after || len(filters) == 0 {
			return
		}
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: consumerInactiveThreshold,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1}
		cons, err := s.js.OrderedConsumer(ctx, StreamIndex, cfg)
		if err != nil {
			yield(IndexRecord{}, fmt.Errorf("exposure index: %w", err))
			return
		}
		info, err := cons.Info(ctx)
		if err != nil {
			yield(IndexRecord{}, fmt.Errorf("exposure index: %w", err))
			return
		}
		if info.NumPending == 0 {
			return
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(4096))
		if err != nil {
			yield(IndexRecord{}, fmt.Errorf("exposure index: %w", err))
			return
		}
		defer it.Stop()
		for {
			m, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				yield(IndexRecord{}, fmt.Errorf("exposure index: %w", err))
				return
			}
			md, err := m.Metadata()
			if err != nil {
				yield(IndexRecord{}, fmt.Errorf("exposure index: %w", err))
				return
			}
			seq := md.Sequence.Stream
			if seq > upTo {
				return
			}
			rec, err := decodeIndex(m.Subject(), seq, m.Data())
			if !yield(rec, err) || err != nil || seq == upTo || md.NumPending == 0 {
				return
			}
		}
	}
}

// AppendIndex appends writes to the exposure index in order, the first
// expecting the stream's last sequence to be last, each the one before it:
// one writer at a time, never a record twice (ErrIndexConflict when the
// stream moved). The publishes are pipelined and their acks awaited
// together. It returns the stream's new last sequence.
func (s *Store) AppendIndex(ctx context.Context, last uint64, writes []IndexWrite) (uint64, error) {
	if len(writes) == 0 {
		return last, nil
	}
	futures := make([]jetstream.PubAckFuture, 0, len(writes))
	for i, w := range writes {
		data, err := json.Marshal(w.Record)
		if err != nil {
			return last, fmt.Errorf("exposure index: encode: %w", err)
		}
		m := nats.NewMsg(w.Subject)
		m.Data = data
		// The expected last sequence alone makes the append exactly
		// once; a Nats-Msg-Id would cost every record a header and the
		// server a duplicate-window entry, for nothing more.
		f, err := s.js.PublishMsgAsync(m, jetstream.WithExpectLastSequence(last+uint64(i)))
		if err != nil {
			return last, fmt.Errorf("exposure index: append: %w", err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Sequence != last+uint64(i)+1 {
				return last, fmt.Errorf("%w: record stored at %d, expected %d", ErrIndexConflict, ack.Sequence, last+uint64(i)+1)
			}
		case err := <-f.Err():
			var apiErr *jetstream.APIError
			if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
				return last, fmt.Errorf("%w: %w", ErrIndexConflict, err)
			}
			return last, fmt.Errorf("exposure index: append: %w", err)
		case <-ctx.Done():
			return last, fmt.Errorf("exposure index: %w", ctx.Err())
		}
	}
	return last + uint64(len(writes)), nil
}
