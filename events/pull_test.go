package events

import "testing"

// TestAckFieldsReadsBothReplyForms: the stream sequence, the consumer's
// delivery, the time and the pending count of a delivery's reply subject,
// in the form without a domain and the one with; anything else is
// refused, so a read never takes a malformed reply for a delivery.
func TestAckFieldsReadsBothReplyForms(t *testing.T) {
	tests := []struct {
		reply               string
		sseq, dseq, pending uint64
		ts                  int64
		ok                  bool
	}{
		{"$JS.ACK.FLEET_REPORTS.c1.1.42.7.1733400000000000000.3", 42, 7, 3, 1733400000000000000, true},
		{"$JS.ACK.hub.ACCHASH.FLEET_REPORTS.c1.1.42.7.1733400000000000000.0", 42, 7, 0, 1733400000000000000, true},
		{"$JS.ACK.hub.ACCHASH.FLEET_REPORTS.c1.1.42.7.1733400000000000000.0.rnd", 42, 7, 0, 1733400000000000000, true},
		{"$JS.ACK.FLEET_REPORTS.c1.1.x.7.1733400000000000000.3", 0, 0, 0, 0, false},
		{"$JS.ACK.FLEET_REPORTS.c1.1.42.7", 0, 0, 0, 0, false},
		{"_INBOX.abc.def", 0, 0, 0, 0, false},
		{"", 0, 0, 0, 0, false},
	}
	for _, tc := range tests {
		sseq, dseq, ts, pending, ok := ackFields(tc.reply)
		if ok != tc.ok || (ok && (sseq != tc.sseq || dseq != tc.dseq || ts != tc.ts || pending != tc.pending)) {
			t.Errorf("ackFields(%q) = %d %d %d %d %v; want %d %d %d %d %v", tc.reply, sseq, dseq, ts, pending, ok, tc.sseq, tc.dseq, tc.ts, tc.pending, tc.ok)
		}
	}
}
