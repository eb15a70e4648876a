package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/nationtech/harmony-fleet/events"
)

// stamper gives the events of a test fixed ids and times: the n-th event
// built for a subject gets the same id in every run (whatever the order in
// which the writers of different subjects run), and every event the time
// at. Its option is the operator's and the agents' EventStamp.
type stamper struct {
	at time.Time

	mu sync.Mutex
	n  map[string]int // subject → events built for it
}

func newStamper(at time.Time) *stamper { return &stamper{at: at, n: map[string]int{}} }

// option sets an event's id and time. An event whose subject does not
// build keeps its id; events.New refuses it anyway.
func (s *stamper) option() events.Option {
	return func(e *events.Event) {
		subject, err := e.Subject()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.n[subject]++
		n := s.n[subject]
		s.mu.Unlock()
		var id ulid.ULID
		if err := id.SetTime(ulid.Timestamp(s.at) + uint64(n)); err != nil {
			return
		}
		sum := sha256.Sum256([]byte(subject + "#" + strconv.Itoa(n)))
		copy(id[6:], sum[:10])
		e.ID, e.Time = id, s.at.UTC()
	}
}

// getHeaders are the headers JetStream adds to a message it returns by
// sequence: where it is stored, not what was published.
var getHeaders = []string{"Nats-Sequence", "Nats-Stream", "Nats-Subject", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"}

// headerExpectedSubjectSeq is the header of an append that expects the
// stream sequence of its subject's last record (optimistic concurrency).
const headerExpectedSubjectSeq = "Nats-Expected-Last-Subject-Sequence"

// dumpStream writes one line per record of stream whose subject keep
// accepts, grouped by subject (in subject order), each subject's records
// in stream order: the subject, every header it was published with (not
// getHeaders), and the data bytes as stored. Records of different subjects interleave differently from run to
// run, so the stream order across subjects is not pinned, and the value of
// headerExpectedSubjectSeq (a stream sequence, which depends on what else
// the stream holds) is written as the position, among its subject's
// records, of the record it names ("0": none). Nothing else is normalised.
func dumpStream(ctx context.Context, js jetstream.JetStream, stream string, keep func(subject string) bool) ([]string, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	bySubject := map[string][]*jetstream.RawStreamMsg{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("stream %s, sequence %d: %w", stream, seq, err)
		}
		if keep(m.Subject) {
			bySubject[m.Subject] = append(bySubject[m.Subject], m)
		}
	}
	var lines []string
	for _, subject := range slices.Sorted(maps.Keys(bySubject)) {
		position := map[string]string{"0": "0"} // stream sequence → position in the subject
		for i, m := range bySubject[subject] {
			position[strconv.FormatUint(m.Sequence, 10)] = strconv.Itoa(i + 1)
		}
		for _, m := range bySubject[subject] {
			line, err := recordLine(stream, m, position)
			if err != nil {
				return nil, err
			}
			lines = append(lines, line)
		}
	}
	return lines, nil
}

// recordLine is one record as a JSON line: stream, subject, headers (keys
// sorted) and the data bytes as stored, unchanged.
func recordLine(stream string, m *jetstream.RawStreamMsg, position map[string]string) (string, error) {
	headers := map[string][]string{}
	for k, vs := range m.Header {
		if slices.Contains(getHeaders, k) {
			continue
		}
		vs = slices.Clone(vs)
		if k == headerExpectedSubjectSeq {
			for i, v := range vs {
				p, ok := position[v]
				if !ok {
					p = "not a record of this subject: " + v
				}
				vs[i] = "position " + p
			}
		}
		headers[k] = vs
	}
	head, err := json.Marshal(struct {
		Stream  string              `json:"stream"`
		Subject string              `json:"subject"`
		Headers map[string][]string `json:"headers"`
	}{stream, m.Subject, headers})
	if err != nil {
		return "", fmt.Errorf("encode %s %d: %w", m.Subject, m.Sequence, err)
	}
	return string(head[:len(head)-1]) + `,"data":` + rawJSON(m.Data) + "}", nil
}

// rawJSON is b itself when it is one line of valid JSON (the bytes are
// pinned as they are), else b as a JSON string.
func rawJSON(b []byte) string {
	if json.Valid(b) && !bytes.ContainsAny(b, "\r\n") {
		return string(b)
	}
	q, _ := json.Marshal(string(b))
	return string(q)
}

// dumpKV writes one line per key of kv in keys, with its current value's
// bytes; a missing key is a line that says so.
func dumpKV(ctx context.Context, kv jetstream.KeyValue, keys []string) ([]string, error) {
	keys = slices.Clone(keys)
	sort.Strings(keys)
	var lines []string
	for _, k := range keys {
		key, _ := json.Marshal(k)
		e, err := kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			lines = append(lines, `{"kv":"`+kv.Bucket()+`","key":`+string(key)+`,"missing":true}`)
		case err != nil:
			return nil, fmt.Errorf("%s key %s: %w", kv.Bucket(), k, err)
		default:
			lines = append(lines, `{"kv":"`+kv.Bucket()+`","key":`+string(key)+`,"value":`+rawJSON(e.Value())+"}")
		}
	}
	return lines, nil
}

// subjectToken is the i-th token of a subject, "" past its end.
func subjectToken(subject string, i int) string {
	t := strings.Split(subject, ".")
	if i < len(t) {
		return t[i]
	}
	return ""
}
