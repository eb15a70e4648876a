package authcallout_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// TestTheSubjectScopedDirectGetReadsOnlyTheDevicesOwnKey is the attack
// test of ADR 0034: device A sends, on the one JetStream subject it may
// publish (the subject-scoped direct get of its own intent key), every
// request body and header the server's direct get knows (a sequence, the
// next or last message of another subject, several subjects, batches, a
// time, up_to_seq, no_hdr, max_bytes, an API level) and hostile
// JetStream headers, through the real callout chain on the embedded
// server. Each answer is A's own value or an error status: never B's
// value, another key, another stream, or a message by sequence. The
// server takes the key from the subject alone and refuses every field
// that would choose another message, so no request lets a device ask
// "only if newer than sequence N" either (what ADR 0034 looked for).
func TestTheSubjectScopedDirectGetReadsOnlyTheDevicesOwnKey(t *testing.T) {
	e := newEnv(t, envOptions{})
	srcA := e.device(t, "dev-a", false)
	e.device(t, "dev-b", false)
	ctx := context.Background()
	// B's value is written first (sequence 1 of the bucket, when nothing
	// else wrote it), A's after it, then B's again: a request that reads
	// by sequence, or the next message of a subject, would land on B.
	secretB := []byte(`{"device":"dev-b","secret":"b-only"}`)
	for _, w := range []struct {
		key string
		val []byte
	}{{"dev-b", secretB}, {"dev-a", []byte(`{"device":"dev-a"}`)}, {"dev-b", secretB}} {
		if _, err := e.intent.Put(ctx, w.key, w.val); err != nil {
			t.Fatal(err)
		}
	}
	ownA, err := e.intent.Get(ctx, "dev-a")
	if err != nil {
		t.Fatal(err)
	}
	ownKV, _ := events.IntentKVSubject("dev-a")
	bKV, _ := events.IntentKVSubject("dev-b")
	dg, _ := events.IntentDirectGetSubject("dev-a")
	c, err := e.connect("dev-a", srcA, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// answer is what a request got: A's own value (with or without the
	// stream's headers) or an error status.
	type answer struct {
		Own    bool   // the data is A's value
		Status string // the Status header, "" for a message
	}
	own := answer{Own: true}
	bad := answer{Status: "408"}
	tests := []struct {
		name   string
		body   string
		header nats.Header
		want   answer
	}{
		{"an empty request reads A's value (control)", "", nil, own},
		{"a sequence of B's message is refused", `{"seq":1}`, nil, bad},
		{"the next message of B's key is refused", `{"next_by_subj":"` + bKV + `"}`, nil, bad},
		{"the next message of any key from a sequence is refused", `{"seq":1,"next_by_subj":">"}`, nil, bad},
		{"the last message of B's key is refused", `{"last_by_subj":"` + bKV + `"}`, nil, bad},
		{"the last message of every key is refused", `{"multi_last":[">"]}`, nil, bad},
		{"a batch is refused", `{"batch":10}`, nil, bad},
		{"a batch from a sequence is refused", `{"seq":1,"batch":10}`, nil, bad},
		{"a start time is refused", `{"start_time":"2000-01-01T00:00:00Z"}`, nil, bad},
		{"up_to_seq (the value as it was at a sequence) is refused", `{"up_to_seq":1}`, nil, bad},
		{"up_to_time is refused", `{"up_to_time":"2000-01-01T00:00:00Z"}`, nil, bad},
		{"a malformed body is refused", `{"seq":`, nil, bad},
		{"no_hdr reads A's value without its headers", `{"no_hdr":true}`, nil, own},
		{"max_bytes reads A's value whole", `{"max_bytes":1}`, nil, own},
		{"unknown fields are ignored", `{"stream":"FLEET_REPORTS","subject":"` + bKV + `"}`, nil, own},
		{"a required API level the server has reads A's value", "", nats.Header{"Nats-Required-Api-Level": {"0"}}, own},
		{"a required API level above the server's is refused", "", nats.Header{"Nats-Required-Api-Level": {"999"}}, answer{Status: "412"}},
		{"JetStream headers naming B's key and another stream are ignored", "", nats.Header{
			"Nats-Stream": {events.StreamReports}, "Nats-Subject": {bKV}, "Nats-Sequence": {"1"},
			"Nats-Expected-Last-Subject-Sequence": {"1"}, "KV-Operation": {"PURGE"},
		}, own},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := &nats.Msg{Subject: dg, Data: []byte(tc.body), Header: tc.header}
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			r, err := c.RequestMsgWithContext(rctx, m)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			got := answer{Status: r.Header.Get("Status")}
			if got.Status == "" {
				if subj := r.Header.Get("Nats-Subject"); subj != "" && subj != ownKV {
					t.Fatalf("the answer is the message of %s", subj)
				}
				if seq := r.Header.Get("Nats-Sequence"); seq != "" && seq != strconv.FormatUint(ownA.Revision(), 10) {
					t.Fatalf("the answer is the message at sequence %s (A's is %d)", seq, ownA.Revision())
				}
				got.Own = string(r.Data) == string(ownA.Value())
				if !got.Own {
					t.Fatalf("the answer is not A's value: %d bytes", len(r.Data))
				}
			} else if len(r.Data) > 0 {
				t.Fatalf("an error status %s came with %d bytes", got.Status, len(r.Data))
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
	c.noViolation(t)
}
