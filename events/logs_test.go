package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

const (
	testReader  = "0123456789abcdef0123456789abcdef"
	testRequest = "fedcba9876543210fedcba9876543210"
)

func TestLogsSubject(t *testing.T) {
	tests := []struct {
		name             string
		device, r, q     string
		want             string
		wantErr          error
		wantErrSubstring string
	}{
		{"a device, a reader and a request build the answer's subject", "dev-1", testReader, testRequest,
			"fleet.logs.dev-1." + testReader + "." + testRequest, nil, ""},
		{"a wildcard device is refused", "*", testReader, testRequest, "", events.ErrInvalidToken, "device"},
		{"a short request id is refused, naming the rule", "dev-1", testReader, "abc", "", events.ErrInvalidSubject, "32 lowercase hex"},
		{"an upper-case reader id is refused", "dev-1", strings.ToUpper(testReader), testRequest, "", events.ErrInvalidSubject, "reader id"},
		{"a request id holding a dot is refused", "dev-1", testReader, testRequest[:31] + ".", "", events.ErrInvalidSubject, "request id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.LogsSubject(tc.device, tc.r, tc.q)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantErrSubstring) {
					t.Fatalf("LogsSubject error = %v, want %v naming %q", err, tc.wantErr, tc.wantErrSubstring)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("LogsSubject = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseLogsSubject(t *testing.T) {
	subj := "fleet.logs.dev-1." + testReader + "." + testRequest
	got, err := events.ParseSubject(subj)
	if err != nil {
		t.Fatal(err)
	}
	want := events.Ref{Family: events.FamilyDeviceLogs, Keys: events.Keys{Device: "dev-1"}, Reader: testReader, Request: testRequest}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("ParseSubject (-want +got):\n%s", diff)
	}
	if back, err := got.Subject(); err != nil || back != subj {
		t.Fatalf("round trip gave %q, %v", back, err)
	}
	for _, bad := range []string{"fleet.logs.dev-1", "fleet.logs.dev-1." + testReader, "fleet.logs.dev-1." + testReader + ".x",
		"fleet.logs.*." + testReader + "." + testRequest, subj + ".x"} {
		if _, err := events.ParseSubject(bad); err == nil {
			t.Errorf("ParseSubject(%q) accepted", bad)
		}
	}
	if _, err := events.StreamOf("fleet.logs.dev-1.>"); err == nil {
		t.Error("StreamOf gave a stream for log subjects: logs are never stored")
	}
}

func TestNoStreamCapturesLogs(t *testing.T) {
	subj := "fleet.logs.dev-1." + testReader + "." + testRequest
	for _, sc := range events.StreamConfigs(events.ProvisionOptions{}) {
		for _, f := range sc.Subjects {
			if subjectMatches(f, subj) {
				t.Errorf("stream %s captures %s with %q: logs must never be stored", sc.Name, subj, f)
			}
		}
	}
}

// subjectMatches reports whether NATS filter f matches subject s.
func subjectMatches(f, s string) bool {
	ft, st := strings.Split(f, "."), strings.Split(s, ".")
	for i, t := range ft {
		if t == ">" {
			return len(st) > i
		}
		if i >= len(st) || (t != "*" && t != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

func TestLogsRequestValidate(t *testing.T) {
	ok := events.LogsRequest{Reader: testReader, Request: testRequest, Namespace: "lab", Deployment: "analysis-api", Service: "web"}
	tests := []struct {
		name   string
		change func(*events.LogsRequest)
		want   string
	}{
		{"a complete request is valid", func(*events.LogsRequest) {}, ""},
		{"a request without a service names the field", func(r *events.LogsRequest) { r.Service = "" }, "logs.service"},
		{"a negative tail names the field", func(r *events.LogsRequest) { r.Tail = -1 }, "logs.tail"},
		{"a follow limit past the maximum names the bound", func(r *events.LogsRequest) { r.FollowSeconds = 3601 }, "logs.followSeconds"},
		{"a bad request id names the field", func(r *events.LogsRequest) { r.Request = "x" }, "request id"},
		{"a deployment with a dot names the field", func(r *events.LogsRequest) { r.Deployment = "a.b" }, "name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.change(&r)
			err := r.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}
