package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
)

func TestValidateToken(t *testing.T) {
	tests := []struct {
		name     string
		value    string
		wantRule string // "" means valid
	}{
		{"a DNS label is accepted", "analysis-api", ""},
		{"letters digits dash and underscore are accepted", "Dev_01-a", ""},
		{"a token of exactly 63 characters is accepted", strings.Repeat("a", 63), ""},
		{"an empty token is rejected", "", "must not be empty"},
		{"a token with a dot is rejected because dots separate subject tokens", "a.b", "must not contain '.'"},
		{"a lone dot is rejected", ".", "must not contain '.'"},
		{"a star wildcard is rejected", "*", "must not contain '*'"},
		{"a star inside a token is rejected", "dev*", "must not contain '*'"},
		{"a greater-than wildcard is rejected", ">", "must not contain '>'"},
		{"a space is rejected", "my device", "must not contain whitespace"},
		{"a tab is rejected", "dev\t1", "must not contain whitespace"},
		{"a newline is rejected", "dev\n", "must not contain whitespace"},
		{"a 64-character token is rejected as over-long", strings.Repeat("a", 64), "at most 63 characters"},
		{"a slash is rejected because subjects and KV keys must stay simple", "a/b", "only letters, digits"},
		{"a dollar sign is rejected", "$SYS", "only letters, digits"},
		{"a non-ASCII letter is rejected", "gerät", "only letters, digits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := events.ValidateToken(events.TokenDevice, tc.value)
			if tc.wantRule == "" {
				if err != nil {
					t.Fatalf("ValidateToken(%q) = %v, want nil", tc.value, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateToken(%q) = nil, want an error with %q", tc.value, tc.wantRule)
			}
			if !errors.Is(err, events.ErrInvalidToken) {
				t.Errorf("error %v does not wrap ErrInvalidToken", err)
			}
			var te *events.TokenError
			if !errors.As(err, &te) || te.Kind != events.TokenDevice || te.Value != tc.value {
				t.Errorf("error %#v does not name the token kind and value", err)
			}
			if !strings.Contains(err.Error(), tc.wantRule) || !strings.Contains(err.Error(), "device") {
				t.Errorf("error %q does not name the token and the rule %q", err, tc.wantRule)
			}
		})
	}
}

func TestBuildersValidateEveryToken(t *testing.T) {
	tests := []struct {
		name     string
		build    func() (string, error)
		wantKind string
	}{
		{"a deployment intent subject rejects a bad namespace", func() (string, error) { return events.DeploymentIntentSubject("a.b", "x") }, "namespace"},
		{"a deployment intent subject rejects a bad name", func() (string, error) { return events.DeploymentIntentSubject("ns", ">") }, "name"},
		{"a taskrun intent subject rejects an empty name", func() (string, error) { return events.TaskRunIntentSubject("ns", "") }, "name"},
		{"a rollout subject rejects a wildcard namespace", func() (string, error) { return events.DeploymentRolloutSubject("*", "x") }, "namespace"},
		{"a report subject rejects a device with a space", func() (string, error) { return events.ReportSubject("d 1", events.ReportHeartbeat) }, "device"},
		{"a command subject rejects an over-long device", func() (string, error) { return events.CommandSubject(strings.Repeat("d", 64)) }, "device"},
		{"an intent KV key rejects a device with a dot", func() (string, error) { return events.IntentKey("d.1") }, "device"},
		{"a direct get subject rejects a wildcard device", func() (string, error) { return events.IntentDirectGetSubject("*") }, "device"},
		{"an identity key rejects an empty subject", func() (string, error) { return events.IdentityKey("") }, "identity subject"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.build()
			var te *events.TokenError
			if !errors.As(err, &te) {
				t.Fatalf("got %v, want a *TokenError", err)
			}
			if te.Kind != tc.wantKind {
				t.Errorf("token kind %q, want %q", te.Kind, tc.wantKind)
			}
		})
	}
}
