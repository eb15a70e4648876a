package events

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// jsonEnvelope is the envelope decoded by encoding/json alone.
func jsonEnvelope(payload []byte) (Event, error) {
	var e Event
	err := json.Unmarshal(payload, &e)
	return e, err
}

// goldenPayloads are the payloads of the golden logs: records earlier
// builds wrote, with their subjects.
func goldenPayloads(t testing.TB) (subjects []string, payloads [][]byte) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("golden logs: %v (%d files)", err, len(files))
	}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			var l struct {
				Subject string          `json:"subject"`
				Payload json.RawMessage `json:"payload"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			subjects, payloads = append(subjects, l.Subject), append(payloads, l.Payload)
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return subjects, payloads
}

// sameAsEncodingJSON checks the strict reader against encoding/json on one
// payload: what it accepts encoding/json decodes to the same Event, and
// DecodeStored gives the same event or the same refusal either way.
func sameAsEncodingJSON(t *testing.T, subject string, payload []byte) (fast bool) {
	t.Helper()
	if e, ok := readEnvelope(payload, false); ok {
		want, err := jsonEnvelope(payload)
		if err != nil {
			t.Fatalf("the strict reader took a payload encoding/json refuses (%v): %s", err, payload)
		}
		if diff := cmp.Diff(want, e); diff != "" {
			t.Fatalf("the strict reader read %s otherwise than encoding/json (-json +strict):\n%s", payload, diff)
		}
		fast = true
	}
	got, gotReason, gotErr := decodeStoredWith(subject, payload, unmarshalEnvelope)
	want, wantReason, wantErr := decodeStoredWith(subject, payload, jsonEnvelope)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeStored of %s (-json +strict):\n%s", payload, diff)
	}
	if gotReason != wantReason || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Errorf("DecodeStored of %s: %s %v; encoding/json: %s %v", payload, gotReason, gotErr, wantReason, wantErr)
	}
	// A replay's own payload: the same answer, Data not copied.
	owned, ownedReason, ownedErr := decodeStoredWith(subject, bytes.Clone(payload), unmarshalOwnedEnvelope)
	if diff := cmp.Diff(want, owned); diff != "" {
		t.Errorf("DecodeStored of an owned %s (-json +owned):\n%s", payload, diff)
	}
	if ownedReason != wantReason || (ownedErr == nil) != (wantErr == nil) || (ownedErr != nil && ownedErr.Error() != wantErr.Error()) {
		t.Errorf("DecodeStored of an owned %s: %s %v; encoding/json: %s %v", payload, ownedReason, ownedErr, wantReason, wantErr)
	}
	return fast
}

func TestTheEnvelopeReaderReadsAsEncodingJSON(t *testing.T) {
	subjects, payloads := goldenPayloads(t)
	t.Run("every golden record is read by the strict reader, as encoding/json reads it", func(t *testing.T) {
		for i, p := range payloads {
			if !sameAsEncodingJSON(t, subjects[i], p) {
				t.Errorf("golden record %s is left to encoding/json: the strict reader should take what json.Marshal writes", p)
			}
		}
	})
	ev, err := New(Keys{Device: "edge-1"}, WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u-1", Generation: 3, RevisionID: "3-abc", Phase: WorkloadConverged},
		WithCorrelation("u-1", 3))
	if err != nil {
		t.Fatal(err)
	}
	canon, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	const subject = "fleet.report.edge-1.workload"
	c := string(canon)
	data := c[strings.Index(c, `"data":`)+len(`"data":`) : len(c)-1]
	head := c[:strings.Index(c, `,"data":`)]
	withData := func(d string) string { return head + `,"data":` + d + `}` }
	tests := []struct {
		name    string
		payload string
		fast    bool // the strict reader takes it
	}{
		{"a canonical report is read by the strict reader", c, true},
		{"a report without correlation is read by the strict reader", strings.Replace(c, `,"correlation":{"deploymentUid":"u-1","generation":3}`, "", 1), true},
		{"data with whitespace, numbers, literals, arrays and non-ASCII bytes is read by the strict reader",
			withData("{ \"a\" : [ 1, -0.5e+3, 0, 2E-2, true, false, null, {}, [] ],\n\t\"b\":\"é\xff\" }"), true},
		{"empty keys are read by the strict reader", strings.Replace(c, `"keys":{"device":"edge-1"}`, `"keys":{}`, 1), true},
		{"every key is read by the strict reader", strings.Replace(c, `"keys":{"device":"edge-1"}`, `"keys":{"namespace":"lab","name":"api","device":"edge-1"}`, 1), true},
		{"an unknown type is read by the strict reader and refused", strings.Replace(c, `device.workload.status`, `device.workload.gossip`, 1), true},
		{"a negative version is read by the strict reader and refused", strings.Replace(c, `"version":1`, `"version":-1`, 1), true},
		{"a data that is no object is left to encoding/json", withData(`"x"`), false},
		{"a null data is left to encoding/json", withData(`null`), false},
		{"an escape in data is left to encoding/json", withData(`{"a":"\u0041\n"}`), false},
		{"a control byte in data is left to encoding/json, which refuses it", withData("{\"a\":\"\x01\"}"), false},
		{"a leading zero in data is left to encoding/json, which refuses it", withData(`{"a":01}`), false},
		{"a bare minus in data is left to encoding/json", withData(`{"a":-}`), false},
		{"a fraction without digits is left to encoding/json", withData(`{"a":1.}`), false},
		{"an exponent without digits is left to encoding/json", withData(`{"a":1e}`), false},
		{"data nested deeper than the strict reader follows is left to encoding/json", withData(`{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`), false},
		{"truncated data is left to encoding/json", withData(`{"a":[1,2`), false},
		{"a trailing comma in data is left to encoding/json", withData(`{"a":1,}`), false},
		{"whitespace between fields is left to encoding/json", strings.Replace(c, `"version":1,`, `"version": 1 ,`, 1), false},
		{"a trailing newline is left to encoding/json", c + "\n", false},
		{"trailing bytes are left to encoding/json", c + "x", false},
		{"reordered fields are left to encoding/json", strings.Replace(strings.Replace(c, `"version":1,`, "", 1), `"type":`, `"version":1,"type":`, 1), false},
		{"a field in another case is left to encoding/json", strings.Replace(c, `"type":`, `"TYPE":`, 1), false},
		{"a repeated type is left to encoding/json, whose last one wins", strings.Replace(c, `"version":1,`, `"version":1,"type":"device.heartbeat",`, 1), false},
		{"an unknown field is left to encoding/json", strings.Replace(c, `"version":1,`, `"version":1,"extra":[1],`, 1), false},
		{"an escaped key is left to encoding/json", strings.Replace(c, `"device":"edge-1"`, `"device":"\u0065dge-1"`, 1), false},
		{"a key with non-ASCII bytes is left to encoding/json", strings.Replace(c, `"device":"edge-1"`, "\"device\":\"edg\xc3\xa9\"", 1), false},
		{"a key with invalid UTF-8 is left to encoding/json", strings.Replace(c, `"device":"edge-1"`, "\"device\":\"edge\xff\"", 1), false},
		{"keys out of order are left to encoding/json", strings.Replace(c, `"keys":{"device":"edge-1"}`, `"keys":{"device":"edge-1","namespace":"lab"}`, 1), false},
		{"a null correlation is left to encoding/json", strings.Replace(c, `"correlation":{"deploymentUid":"u-1","generation":3}`, `"correlation":null`, 1), false},
		{"a version written as a fraction is left to encoding/json, which refuses it", strings.Replace(c, `"version":1`, `"version":1.0`, 1), false},
		{"a version out of range is left to encoding/json, which refuses it", strings.Replace(c, `"version":1`, `"version":99999999999999999999`, 1), false},
		{"a generation out of range is left to encoding/json, which refuses it", strings.Replace(c, `"generation":3}`, `"generation":99999999999999999999}`, 1), false},
		{"a time that is no RFC 3339 time is left to encoding/json, which refuses it", strings.Replace(c, ev.Time.Format("2006-01-02"), "2026-13-45", 1), false},
		{"an id that is no ULID is left to encoding/json, which refuses it", strings.Replace(c, ev.ID.String(), "not-a-ulid", 1), false},
		{"a string id that is a number is left to encoding/json", strings.Replace(c, `"`+ev.ID.String()+`"`, `7`, 1), false},
		{"an empty object is left to encoding/json", `{}`, false},
		{"null is left to encoding/json", `null`, false},
		{"an array is left to encoding/json", `[]`, false},
		{"an empty payload is refused", ``, false},
		{"a truncated envelope is left to encoding/json", c[:len(c)/2], false},
		{"a report stored on another device's subject is read by the strict reader and refused", strings.ReplaceAll(c, "edge-1", "edge-2"), true},
		{"data that is canonical JSON of another shape is read by the strict reader", withData(data[:len(data)-1] + `,"more":{"x":[1]}}`), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if fast := sameAsEncodingJSON(t, subject, []byte(tc.payload)); fast != tc.fast {
				t.Errorf("the strict reader took it: %t, want %t", fast, tc.fast)
			}
		})
	}
}

// FuzzEnvelopeReader: for any payload, what the strict reader accepts
// encoding/json decodes to the same Event, and DecodeStored answers the
// same either way.
func FuzzEnvelopeReader(f *testing.F) {
	subjects, payloads := goldenPayloads(f)
	for i, p := range payloads {
		if i%7 == 0 {
			f.Add(subjects[i], p)
		}
	}
	f.Add("fleet.report.x.workload", []byte(`{"id":"01KDYAKBNP0000000000000007","type":"device.workload.status","version":1,"time":"2026-01-02T03:04:13.75Z","keys":{"device":"x"},"data":{"a":[1,{"b":null}]}}`))
	f.Fuzz(func(t *testing.T, subject string, payload []byte) {
		sameAsEncodingJSON(t, subject, payload)
	})
}

// sameDataAsEncodingJSON checks Decode against encoding/json alone on one
// event's data, decoded as a RolloutTransition for a rollout type, as a
// DeviceInventory for an inventory and as a WorkloadStatus for any other: the same value (Released's nil-ness included), and an
// error exactly when encoding/json errs; fast says whether the strict
// reader took it.
func sameDataAsEncodingJSON(t *testing.T, typ Type, version int, data []byte) (fast bool) {
	t.Helper()
	ev := Event{Type: typ, Version: version, Data: data}
	if typ == TypeDeviceInventory {
		_, fast = readDeviceInventory(data)
		got, gerr := Decode[DeviceInventory](ev)
		want, werr := decodeJSON[DeviceInventory](ev)
		if (gerr == nil) != (werr == nil) || !cmp.Equal(got, want) || (got.Labels == nil) != (want.Labels == nil) {
			t.Fatalf("Decode(%q) = %+v, %v; encoding/json: %+v, %v", data, got, gerr, want, werr)
		}
		return fast && werr == nil
	}
	if info, _ := typ.Info(); info.Family != FamilyDeploymentRollout {
		_, fast = readWorkloadStatus(data)
		got, gerr := Decode[WorkloadStatus](ev)
		want, werr := decodeJSON[WorkloadStatus](ev)
		if (gerr == nil) != (werr == nil) || !cmp.Equal(got, want) {
			t.Fatalf("Decode(%q) = %+v, %v; encoding/json: %+v, %v", data, got, gerr, want, werr)
		}
		return fast && werr == nil
	}
	_, fast = readRolloutTransition(data)
	got, gerr := Decode[RolloutTransition](ev)
	want, werr := decodeJSON[RolloutTransition](ev)
	if (gerr == nil) != (werr == nil) || !cmp.Equal(got, want, cmp.AllowUnexported(RolloutTransition{})) || (got.Released == nil) != (want.Released == nil) {
		t.Fatalf("Decode(%q) = %+v, %v; encoding/json: %+v, %v", data, got, gerr, want, werr)
	}
	return fast && werr == nil
}

func TestTheDataReaderReadsAsEncodingJSON(t *testing.T) {
	marshal := func(d any) string {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	since := time.Date(2026, 3, 4, 5, 6, 7, 890, time.FixedZone("x", 3600))
	r := marshal(WorkloadStatus{Namespace: "ns", Deployment: "app", UID: "u", Generation: 1, RevisionID: "1", Phase: WorkloadConverged,
		Since: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)})
	tr := marshal(RolloutTransition{UID: "u", Generation: 1, RevisionID: "1", Counts: RolloutCounts{Total: 1, Pending: 1}})
	open := tr[:len(tr)-1] // the transition without its closing brace
	inv := marshal(DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: "6.6.51+rpt-rpi-v8", AgentVersion: "0.9.0"})
	invOpen := inv[:len(inv)-1]
	tests := []struct {
		name string
		typ  Type
		data string
		fast bool // the strict reader takes it
	}{
		{"a canonical report is read by the strict reader", TypeWorkloadStatus, r, true},
		{"a report with an error and a time in another zone is read by the strict reader", TypeWorkloadStatus,
			marshal(WorkloadStatus{Namespace: "ns", Deployment: "app", UID: "u-1", Generation: 3, RevisionID: "r", Phase: WorkloadFailed, Error: "exit 1", Since: since}), true},
		{"a report with the smallest generation is read by the strict reader", TypeWorkloadStatus,
			marshal(WorkloadStatus{Generation: -9223372036854775808, Phase: WorkloadFailed, Since: since.UTC()}), true},
		{"a report of a phase this build does not know is read by the strict reader", TypeWorkloadStatus, strings.Replace(r, `"Converged"`, `"Degraded"`, 1), true},
		{"an empty report is read by the strict reader, its zero time included", TypeWorkloadStatus, marshal(WorkloadStatus{}), true},
		{"a report waiting for its maintenance window is read by the strict reader, with the opening", TypeWorkloadStatus,
			marshal(WorkloadStatus{Namespace: "ns", Deployment: "app", UID: "u-1", Generation: 3, RevisionID: "r", Phase: WorkloadPending, Error: "waiting", Since: since, WindowOpens: &since}), true},
		{"a canonical transition is read by the strict reader", TypeRolloutReleased,
			marshal(RolloutTransition{UID: "u", Generation: 1, RevisionID: "1", Counts: RolloutCounts{Total: 3, Succeeded: 1, Pending: 1, Failed: 1, Canaries: 2, CanariesSucceeded: 1, CanariesFailed: 1}}), true},
		{"a failed canary's transition is read by the strict reader", TypeRolloutCanaryFailed, marshal(RolloutTransition{UID: "u", Generation: 2, Device: "dev-1", Error: "exit 1"}), true},
		{"a release list is read by the strict reader", TypeRolloutReleased, marshal(RolloutTransition{UID: "u", Generation: 2, Released: []string{"dev-1", "dev-2"}}), true},
		{"a release list of one device is read by the strict reader", TypeRolloutCanaryStage, marshal(RolloutTransition{UID: "u", Generation: 2, Released: []string{"dev-1"}}), true},
		{"an empty release list is read by the strict reader as an empty list", TypeRolloutReleased, open + `,"released":[]}`, true},
		{"a batch, an approval and a rollback are read by the strict reader", TypeRolloutApproved,
			marshal(RolloutTransition{UID: "u", Generation: 4, Batch: 2, By: "alice@example.com", Request: "r-1", RollbackTo: 3}), true},
		{"a follow transition is read by the strict reader", TypeRolloutTargetAdded,
			marshal(RolloutTransition{UID: "u", Generation: 4, Device: "d", Follow: true, Reason: "labels changed", Change: "role=analyzer (was role=other)"}), true},
		{"a follower handed the last revision that succeeded, in its batch and budget group, is read by the strict reader", TypeRolloutTargetAdded,
			marshal(RolloutTransition{UID: "u", Generation: 5, Counts: RolloutCounts{Total: 4, Followers: 1}, Device: "d", Batch: 2, Follow: true, Reason: "created", HandedGeneration: 3, HandedRevisionID: "r3", BudgetGroup: "lyon"}), true},

		{"an inventory of an older agent is read by the strict reader", TypeDeviceInventory, inv, true},
		{"an inventory with labels and a time zone is read by the strict reader", TypeDeviceInventory,
			marshal(DeviceInventory{OS: "Debian", Arch: "arm64", Kernel: "6.1", AgentVersion: "v1", Labels: map[string]string{"site": "lyon", "role": "api", "a": ""}, TimeZone: "Europe/Paris"}), true},
		{"an inventory with a time zone and no labels is read by the strict reader", TypeDeviceInventory,
			marshal(DeviceInventory{Arch: "amd64", TimeZone: "America/Argentina/Buenos_Aires"}), true},
		{"an empty inventory is read by the strict reader", TypeDeviceInventory, marshal(DeviceInventory{}), true},
		{"a hostile time zone is read by the strict reader as it is (LoadTimeZone refuses it)", TypeDeviceInventory,
			marshal(DeviceInventory{TimeZone: "../../etc/passwd"}), true},
		{"an escaped time zone is left to encoding/json, which unescapes it", TypeDeviceInventory, invOpen + `,"timeZone":"Europe\/Paris"}`, false},
		{"a time zone with a control byte is left to encoding/json", TypeDeviceInventory, invOpen + ",\"timeZone\":\"a\x01\"}", false},
		{"a repeated time zone is left to encoding/json, whose last one wins", TypeDeviceInventory, invOpen + `,"timeZone":"UTC","timeZone":"Europe/Paris"}`, false},
		{"labels out of key order are left to encoding/json", TypeDeviceInventory, invOpen + `,"labels":{"b":"1","a":"2"}}`, false},
		{"a repeated label key is left to encoding/json, whose last one wins", TypeDeviceInventory, invOpen + `,"labels":{"a":"1","a":"2"}}`, false},
		{"empty labels are left to encoding/json, which reads an empty map", TypeDeviceInventory, invOpen + `,"labels":{}}`, false},
		{"null labels are left to encoding/json", TypeDeviceInventory, invOpen + `,"labels":null}`, false},
		{"a label that is no string is left to encoding/json, which refuses it", TypeDeviceInventory, invOpen + `,"labels":{"a":1}}`, false},
		{"labels without their end are left to encoding/json, which refuses them", TypeDeviceInventory, invOpen + `,"labels":{"a":"1"`, false},
		{"a time zone before the labels is left to encoding/json", TypeDeviceInventory, invOpen + `,"timeZone":"UTC","labels":{"a":"1"}}`, false},
		{"a time zone that is no string is left to encoding/json, which refuses it", TypeDeviceInventory, invOpen + `,"timeZone":7}`, false},
		{"an escaped string is left to encoding/json, which unescapes it", TypeWorkloadStatus, strings.Replace(r, `"ns"`, `"n\u0073"`, 1), false},
		{"a key in another case is left to encoding/json, which matches it", TypeWorkloadStatus, strings.Replace(r, `"namespace"`, `"Namespace"`, 1), false},
		{"a key spelled with a letter that folds to ASCII is left to encoding/json, which matches it", TypeWorkloadStatus,
			strings.Replace(r, `"namespace"`, `"namespaſe"`, 1), false},
		{"whitespace is left to encoding/json", TypeWorkloadStatus, "{ " + r[1:], false},
		{"a trailing field repeating the uid is left to encoding/json, whose last one wins", TypeWorkloadStatus, r[:len(r)-1] + `,"uid":"other"}`, false},
		{"an unknown field is left to encoding/json, which ignores it", TypeWorkloadStatus, r[:len(r)-1] + `,"admin":true}`, false},
		{"a leading zero is left to encoding/json, which refuses it", TypeWorkloadStatus, strings.Replace(r, `"generation":1`, `"generation":01`, 1), false},
		{"a generation out of range is left to encoding/json, which refuses it", TypeWorkloadStatus, strings.Replace(r, `"generation":1`, `"generation":9223372036854775808`, 1), false},
		{"a fraction is left to encoding/json, which refuses it", TypeWorkloadStatus, strings.Replace(r, `"generation":1`, `"generation":1.5`, 1), false},
		{"a time that is no time is left to encoding/json, which refuses it", TypeWorkloadStatus, strings.Replace(r, `"2026-01-01T00:00:00Z"`, `"yesterday"`, 1), false},
		{"a null is left to encoding/json", TypeWorkloadStatus, strings.Replace(r, `"ns"`, `null`, 1), false},
		{"a non-ASCII string is left to encoding/json", TypeWorkloadStatus, strings.Replace(r, `"ns"`, `"né"`, 1), false},
		{"invalid UTF-8 is left to encoding/json, which replaces it", TypeWorkloadStatus, strings.Replace(r, `"ns"`, "\"n\xff\"", 1), false},
		{"a NUL byte in a string is left to encoding/json, which refuses it", TypeWorkloadStatus, strings.Replace(r, `"ns"`, "\"n\x00\"", 1), false},
		{"a cut report is left to encoding/json, which refuses it", TypeWorkloadStatus, r[:40], false},
		{"trailing bytes after a report are left to encoding/json, which refuses them", TypeWorkloadStatus, r + `{}`, false},
		{"a report read as another type is refused", TypeDeviceHeartbeat, r, false},
		{"a null release list is left to encoding/json", TypeRolloutReleased, open + `,"released":null}`, false},
		{"a release list with a number is left to encoding/json, which refuses it", TypeRolloutReleased, open + `,"released":["a",1]}`, false},
		{"a release list with a trailing comma is left to encoding/json, which refuses it", TypeRolloutReleased, open + `,"released":["a",]}`, false},
		{"a release list without its end is left to encoding/json, which refuses it", TypeRolloutReleased, open + `,"released":["a"`, false},
		{"fields out of order are left to encoding/json", TypeRolloutFailed, open + `,"error":"e","device":"d"}`, false},
		{"a follow written false is left to encoding/json", TypeRolloutTargetAdded, open + `,"follow":false}`, false},
		{"a transition read as a report is left to encoding/json, which reads the fields they share", TypeWorkloadStatus, tr, false},
		{"counts of another shape are left to encoding/json", TypeRolloutStarted, `{"uid":"u","generation":1,"revisionId":"1","counts":{"total":1}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if fast := sameDataAsEncodingJSON(t, tc.typ, 1, []byte(tc.data)); fast != tc.fast {
				t.Errorf("the strict reader took it: %t, want %t", fast, tc.fast)
			}
			sameDataAsEncodingJSON(t, tc.typ, 99, []byte(tc.data)) // a version this build does not know
		})
	}
}

// FuzzDataReader: for any data, Decode of a workload report or a rollout
// transition gives what encoding/json alone gives.
func FuzzDataReader(f *testing.F) {
	f.Add(true, []byte(`{"namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Failed","error":"e","since":"2026-01-01T00:00:00.5+01:00"}`))
	f.Add(true, []byte(`{"namespace":"ns","deployment":"app","uid":"u","generation":1,"revisionId":"1","phase":"Pending","error":"e","since":"2026-01-01T00:00:00Z","windowOpens":"2026-01-01T02:00:00+01:00"}`))
	f.Add(false, []byte(`{"uid":"u","generation":1,"revisionId":"1","counts":{"total":1,"succeeded":0,"pending":1,"failed":0,"canaries":0,"canariesSucceeded":0,"canariesFailed":0},"device":"d","error":"e","released":["a","b"]}`))
	f.Add(false, []byte(`{"uid":"u","generation":4,"revisionId":"","counts":{"total":0,"succeeded":0,"pending":0,"failed":0,"canaries":0,"canariesSucceeded":0,"canariesFailed":0},"batch":2,"by":"a","request":"r","rollbackTo":3,"follow":true,"reason":"x","change":"y"}`))
	f.Fuzz(func(t *testing.T, report bool, data []byte) {
		typ := TypeRolloutReleased
		if report {
			typ = TypeWorkloadStatus
		}
		sameDataAsEncodingJSON(t, typ, 1, data)
	})
}
