package projections

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

// sameAsDecode fails t unless the strict readers give what events.Decode
// gives for data: the same value, and an error exactly when it errs.
func sameAsDecode(t *testing.T, typ events.Type, version int, data []byte) {
	t.Helper()
	ev := events.Event{Type: typ, Version: version, Data: data}
	opt := cmp.AllowUnexported(events.RolloutTransition{})
	if typ == events.TypeWorkloadStatus {
		got, gerr := decodeReport(ev)
		want, werr := events.Decode[events.WorkloadStatus](ev)
		if (gerr == nil) != (werr == nil) || !cmp.Equal(got, want) {
			t.Fatalf("decodeReport(%q) = %+v, %v; events.Decode = %+v, %v", data, got, gerr, want, werr)
		}
		return
	}
	got, gerr := decodeTransition(ev)
	want, werr := events.Decode[events.RolloutTransition](ev)
	if (gerr == nil) != (werr == nil) || !cmp.Equal(got, want, opt) || (got.Released == nil) != (want.Released == nil) {
		t.Fatalf("decodeTransition(%q) = %+v, %v; events.Decode = %+v, %v", data, got, gerr, want, werr)
	}
}

func canonical(t testing.TB, d any) []byte {
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheStrictReadersTakeCanonicalDataAndDecodeItAsEncodingJSONDoes(t *testing.T) {
	since := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("x", 3600))
	reports := []events.WorkloadStatus{
		{Namespace: "ns", Deployment: "app", UID: "u-1", Generation: 3, RevisionID: "r", Phase: events.WorkloadConverged, Since: since},
		{Namespace: "ns", Deployment: "app", UID: "u-1", Generation: -9223372036854775808, Phase: events.WorkloadFailed, Error: "exit 1", Since: since.UTC()},
		{Namespace: "ns", Deployment: "app", UID: "u-1", Generation: 3, RevisionID: "r", Phase: events.WorkloadPending, Error: "waiting", Since: since,
			WindowOpens: &since},
		{},
	}
	for _, d := range reports {
		b := canonical(t, d)
		if _, ok := readReport(b); !ok && d.Since.Year() > 1 {
			t.Errorf("the strict reader gave up on canonical %s", b)
		}
		sameAsDecode(t, events.TypeWorkloadStatus, 1, b)
	}
	transitions := []events.RolloutTransition{
		{UID: "u", Generation: 1, RevisionID: "1", Counts: events.RolloutCounts{Total: 3, Succeeded: 1, Pending: 1, Failed: 1, Canaries: 2, CanariesSucceeded: 1, CanariesFailed: 1}},
		{UID: "u", Generation: 2, Device: "dev-1", Error: "exit 1"},
		{UID: "u", Generation: 2, Released: []string{"dev-1", "dev-2"}},
		{UID: "u", Generation: 2, Released: []string{"dev-1"}},
	}
	for _, d := range transitions {
		b := canonical(t, d)
		if _, ok := readTransition(b); !ok {
			t.Errorf("the strict reader gave up on canonical %s", b)
		}
		sameAsDecode(t, events.TypeRolloutReleased, 1, b)
	}
}

func TestTheStrictReadersLeaveEveryOtherFormToEncodingJSON(t *testing.T) {
	r := `{"namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`
	tr := `{"uid":"u","generation":1,"revisionId":"1","counts":{"total":1,"succeeded":0,"pending":1,"failed":0,"canaries":0,"canariesSucceeded":0,"canariesFailed":0}`
	for _, c := range []struct {
		name string
		typ  events.Type
		data string
	}{
		{"an escaped string", events.TypeWorkloadStatus, `{"namespace":"n\u0073","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"a key in another case", events.TypeWorkloadStatus, `{"Namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"whitespace", events.TypeWorkloadStatus, `{ "namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"a trailing field", events.TypeWorkloadStatus, r[:len(r)-1] + `,"uid":"other"}`},
		{"a leading zero", events.TypeWorkloadStatus, `{"namespace":"ns","deployment":"app","uid":"u","generation":01,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"a generation out of range", events.TypeWorkloadStatus, `{"namespace":"ns","deployment":"app","uid":"u","generation":9223372036854775808,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"a fraction", events.TypeWorkloadStatus, `{"namespace":"ns","deployment":"app","uid":"u","generation":1.5,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"a time that is no time", events.TypeWorkloadStatus, `{"namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"yesterday"}`},
		{"a null", events.TypeWorkloadStatus, `{"namespace":null,"deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"a non-ASCII string", events.TypeWorkloadStatus, `{"namespace":"né","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Converged","since":"2026-01-01T00:00:00Z"}`},
		{"invalid UTF-8", events.TypeWorkloadStatus, "{\"namespace\":\"n\xff\",\"deployment\":\"app\",\"uid\":\"u\",\"generation\":1,\"revisionId\":\"1\",\"phase\":\"Converged\",\"since\":\"2026-01-01T00:00:00Z\"}"},
		{"a cut report", events.TypeWorkloadStatus, r[:40]},
		{"a report of another type", events.TypeDeviceHeartbeat, r},
		{"an empty released list", events.TypeRolloutReleased, tr + `,"released":[]}`},
		{"a null released list", events.TypeRolloutReleased, tr + `,"released":null}`},
		{"a released list with a number", events.TypeRolloutReleased, tr + `,"released":["a",1]}`},
		{"a released list with a trailing comma", events.TypeRolloutReleased, tr + `,"released":["a",]}`},
		{"fields out of order", events.TypeRolloutFailed, tr + `,"error":"e","device":"d"}`},
		{"a transition type that is no rollout", events.TypeWorkloadStatus, tr + `}`},
		{"counts of another shape", events.TypeRolloutStarted, `{"uid":"u","generation":1,"revisionId":"1","counts":{"total":1}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sameAsDecode(t, c.typ, 1, []byte(c.data))
			sameAsDecode(t, c.typ, 99, []byte(c.data)) // a version this build does not know
		})
	}
}

// FuzzFastDecode: for any data, the strict readers decode what
// events.Decode decodes, or leave it to it.
func FuzzFastDecode(f *testing.F) {
	f.Add(true, []byte(`{"namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Failed","error":"e","since":"2026-01-01T00:00:00.5+01:00"}`))
	f.Add(true, []byte(`{"namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Pending","error":"e","since":"2026-01-01T00:00:00Z","windowOpens":"2026-01-01T02:00:00+01:00"}`))
	f.Add(false, []byte(`{"uid":"u","generation":1,"revisionId":"1","counts":{"total":1,"succeeded":0,"pending":1,"failed":0,"canaries":0,"canariesSucceeded":0,"canariesFailed":0},"device":"d","error":"e","released":["a","b"]}`))
	f.Fuzz(func(t *testing.T, report bool, data []byte) {
		typ := events.TypeRolloutReleased
		if report {
			typ = events.TypeWorkloadStatus
		}
		sameAsDecode(t, typ, 1, data)
	})
}
