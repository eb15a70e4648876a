package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/score"
)

func TestCheckOutputFitsAReportAndHidesSecrets(t *testing.T) {
	secrets := []string{"hunter2-long-secret", "hunter2", "abc"}
	tests := []struct {
		name string
		out  string
		want string
	}{
		{"plain output is kept, trimmed", "  connection refused\n", "connection refused"},
		{"a secret value is replaced", "login as admin:hunter2 failed", "login as admin:*** failed"},
		{"a secret holding another is replaced whole", "token hunter2-long-secret", "token ***"},
		{"a secret value cut at the end by the engine is replaced", "token hunter2-lo", "token ***"},
		{"a cut secret value before a final newline is replaced", "token hunter2-lo\n", "token ***"},
		{"an output holding a secret too short to replace is withheld", "code abc", "(withheld: it may hold a secret value)"},
		{"a long output is cut at 200 characters", strings.Repeat("é", 300), strings.Repeat("é", 200) + "…"},
		{"invalid UTF-8 is replaced", "bad \xff byte", "bad \uFFFD byte"},
		{"no output stays empty", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkOutput(tc.out, secrets); got != tc.want {
				t.Errorf("checkOutput(%q) = %q, want %q", tc.out, got, tc.want)
			}
		})
	}
}

func TestUnhealthyErrorQuotesTheOutput(t *testing.T) {
	err := &UnhealthyError{Name: "api", FailingStreak: 3, ExitCode: 1, Output: "line one\nline two"}
	want := `service api is unhealthy: its health check failed 3 times in a row; the last check exited with code 1 and printed "line one\nline two": fix the service, or its healthcheck (command, start_period for a slow start, retries)`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	if got := (&UnhealthyError{Name: "api", FailingStreak: 1, ExitCode: 1}).Error(); !strings.Contains(got, "printed nothing") {
		t.Errorf("an empty output: %s", got)
	}
}

func TestHealthBoundCoversPodmansRules(t *testing.T) {
	svc := func(hc score.Healthcheck) resolvedService {
		return resolvedService{Service: score.Service{Healthcheck: &hc}}
	}
	tests := []struct {
		name     string
		services []resolvedService
		want     time.Duration
	}{
		{"the defaults: 4 checks of 30s interval, 30s timeout and 2s grace", []resolvedService{svc(score.Healthcheck{Command: []string{"x"}})},
			4*(30+30+2)*time.Second + healthSlack},
		{"the start period adds up", []resolvedService{svc(score.Healthcheck{Command: []string{"x"}, Interval: "1s", Timeout: "1s", Retries: 2, StartPeriod: "10s"})},
			10*time.Second + 3*2500*time.Millisecond + healthSlack},
		{"the slowest service decides", []resolvedService{
			svc(score.Healthcheck{Command: []string{"x"}, Interval: "1s", Timeout: "1s", Retries: 1}),
			svc(score.Healthcheck{Command: []string{"x"}, Interval: "10s", Timeout: "1s", Retries: 1}),
		}, 2*(10+1+2)*time.Second + healthSlack},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := healthBound(tc.services); got != tc.want {
				t.Errorf("healthBound = %s, want %s", got, tc.want)
			}
		})
	}
}
