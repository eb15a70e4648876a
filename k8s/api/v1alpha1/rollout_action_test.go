package v1alpha1_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func TestParseRolloutActionAcceptsTheThreeActions(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  fleetv1.RolloutAction
	}{
		{"a pause is read", `{"action":"pause","generation":3,"by":"alice","request":"01JD0000000000000000000000"}`,
			fleetv1.RolloutAction{Action: fleetv1.RolloutActionPause, Generation: 3, By: "alice", Request: "01JD0000000000000000000000"}},
		{"a resume with spaces and another field order is read", `{ "request": "r-1", "by": "system:serviceaccount:ops:ci", "generation": 1, "action": "resume" }`,
			fleetv1.RolloutAction{Action: fleetv1.RolloutActionResume, Generation: 1, By: "system:serviceaccount:ops:ci", Request: "r-1"}},
		{"an approval names its batch", `{"action":"approve","generation":2,"batch":4,"by":"bob@example.com","request":"x.y_z"}`,
			fleetv1.RolloutAction{Action: fleetv1.RolloutActionApprove, Generation: 2, Batch: 4, By: "bob@example.com", Request: "x.y_z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := fleetv1.ParseRolloutAction(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRolloutActionRefusesNamingTheFieldAndTheFix(t *testing.T) {
	tests := []struct {
		name  string
		value string
		want  []string // every string must be in the error
	}{
		{"an empty value is refused", ``, []string{"JSON object"}},
		{"a list is refused", `[1]`, []string{"JSON object"}},
		{"an unknown field is refused", `{"action":"pause","generation":1,"by":"a","request":"r","reason":"x"}`,
			[]string{`unknown field "reason"`, "action, generation, batch, by, request"}},
		{"a differently cased field is refused", `{"action":"pause","generation":1,"BY":"a","request":"r"}`, []string{`unknown field "BY"`}},
		{"a duplicate field is refused", `{"action":"pause","generation":1,"by":"alice","by":"bob","request":"r"}`, []string{`"by" appears twice`}},
		{"something after the object is refused", `{"action":"pause","generation":1,"by":"a","request":"r"}{}`, []string{"nothing after it"}},
		{"an unknown action is refused", `{"action":"stop","generation":1,"by":"a","request":"r"}`, []string{`"action" is "stop"`, `"pause", "resume" or "approve"`}},
		{"a missing action is refused", `{"generation":1,"by":"a","request":"r"}`, []string{`"action" is missing`}},
		{"a generation as a string is refused", `{"action":"pause","generation":"1","by":"a","request":"r"}`, []string{`"generation" must be a whole number`}},
		{"a fractional generation is refused", `{"action":"pause","generation":1.5,"by":"a","request":"r"}`, []string{`"generation" must be a whole number`}},
		{"a missing generation is refused", `{"action":"pause","by":"a","request":"r"}`, []string{`"generation"`, "metadata.generation"}},
		{"an approval without a batch is refused", `{"action":"approve","generation":1,"by":"a","request":"r"}`, []string{`"batch" is required for approve`}},
		{"an approval of batch 0 is refused", `{"action":"approve","generation":1,"batch":0,"by":"a","request":"r"}`, []string{`"batch" must be 1 or more`}},
		{"a pause with a batch is refused", `{"action":"pause","generation":1,"batch":2,"by":"a","request":"r"}`, []string{`"batch" is only for approve`}},
		{"a missing by is refused", `{"action":"pause","generation":1,"request":"r"}`, []string{`"by" is missing`, "user name"}},
		{"a by with a control character is refused", `{"action":"pause","generation":1,"by":"a\nb","request":"r"}`, []string{`"by" contains control characters`}},
		{"a missing request is refused", `{"action":"pause","generation":1,"by":"a"}`, []string{`"request" is missing`, "ULID"}},
		{"a long request id is refused", `{"action":"pause","generation":1,"by":"a","request":"` + strings.Repeat("r", 65) + `"}`, []string{`"request" is longer than 64`}},
		{"a request id with spaces is refused", `{"action":"pause","generation":1,"by":"a","request":"r 1"}`, []string{`"request" may hold only`}},
		{"a value past the size limit is refused", `{"action":"pause","generation":1,"by":"` + strings.Repeat("a", 1100) + `","request":"r"}`, []string{"at most 1024"}},
		{"every problem is named at once", `{"action":"pause","generation":0,"by":"","request":""}`, []string{`"generation"`, `"by"`, `"request"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := fleetv1.ParseRolloutAction(tt.value)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, fleetv1.ErrInvalidRolloutAction) {
				t.Errorf("%v does not wrap ErrInvalidRolloutAction", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestARolloutActionEncodesToWhatParseReadsBack(t *testing.T) {
	a := fleetv1.RolloutAction{Action: fleetv1.RolloutActionApprove, Generation: 7, Batch: 2, By: "<ops>&co", Request: "01JD0000000000000000000000"}
	s, err := a.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, `"by":"<ops>&co"`) {
		t.Errorf("encoded %s: the user name must appear unescaped (the admission policy compares it)", s)
	}
	got, err := fleetv1.ParseRolloutAction(s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := (fleetv1.RolloutAction{Action: fleetv1.RolloutActionPause}).Encode(); !errors.Is(err, fleetv1.ErrInvalidRolloutAction) {
		t.Errorf("an invalid action encoded: %v", err)
	}
}
