package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// The health gate (ADR 0016, "Health-gated convergence"): Apply returns
// only once every service of the revision that has a health check is
// healthy, with an *UnhealthyError once one is unhealthy (Podman's own
// definition: Retries failed checks in a row after the start period), so
// the daemon reports Applying while the checks are starting, then
// Converged or Failed.
//
// Podman schedules health checks with systemd timers. Where no systemd
// runs (containers, small devices, this project's CI), Podman creates the
// container but never runs its check, and the health would stay
// "starting" forever. So the agent runs a check itself (Podman's
// `healthcheck run`, runtime.RunHealthCheck) whenever none ran for the
// check's interval plus healthGrace: with working timers Podman's own
// checks come first and the agent rarely adds one; without them the
// agent's checks are the schedule. Podman records every run alike, so its
// rules (start period, retries, streak) decide the health either way.

// healthGrace is how long past a check's due time the agent waits for the
// engine's own schedule before it runs the check itself: half the
// interval, at most 2 s (systemd fires Podman's timers within 1 s).
func healthGrace(interval time.Duration) time.Duration {
	return min(interval/2, 2*time.Second)
}

// healthPoll is how often the gate looks again at a service that is not
// running (restarted by its policy) while it waits.
const healthPoll = time.Second

// healthSlack is added to the longest time Podman's rules may take to
// decide a service's health (healthBound), for slow engines.
const healthSlack = time.Minute

// maxHealthOutput bounds the check output an *UnhealthyError repeats.
const maxHealthOutput = 200

// minRedacted is the shortest secret value replaced in a check's output;
// an output holding a shorter one is withheld instead.
const minRedacted = 4

// UnhealthyError: a service of the revision has a health check and the
// engine reports it unhealthy: Retries checks in a row failed after its
// start period. The revision failed on this device; the container keeps
// running, and the next pass looks again.
type UnhealthyError struct {
	// Name of the service.
	Name string
	// FailingStreak is how many checks in a row failed.
	FailingStreak int
	// ExitCode of the last check.
	ExitCode int
	// Output of the last check: at most 200 characters, with every secret
	// value of the score replaced by "***" (withheld entirely when a
	// secret value too short to replace safely appears in it).
	Output string
}

func (e *UnhealthyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "service %s is unhealthy: its health check failed %d times in a row; the last check exited with code %d", e.Name, e.FailingStreak, e.ExitCode)
	if e.Output == "" {
		b.WriteString(" and printed nothing")
	} else {
		fmt.Fprintf(&b, " and printed %q", e.Output)
	}
	b.WriteString(": fix the service, or its healthcheck (command, start_period for a slow start, retries)")
	return b.String()
}

// HealthTimeoutError: a service's health stayed "starting" for longer than
// its check's rules allow (healthBound): the engine neither passed nor
// failed its checks. The revision failed on this device.
type HealthTimeoutError struct {
	Name   string
	Waited time.Duration
}

func (e *HealthTimeoutError) Error() string {
	return fmt.Sprintf("service %s's health check neither passed nor failed within %s: the container engine does not run it "+
		"(check the engine's health check support, or remove the healthcheck)", e.Name, e.Waited.Round(time.Second))
}

// ErrNoHealth: a service has a health check but the engine reports no
// health for its container.
var ErrNoHealth = errors.New("the container engine reports no health for a container with a health check")

// healthBound is the longest the gate waits for the checks of services:
// the longest start period plus, for that service, one more check than its
// retries, each taking its interval, timeout and grace, plus healthSlack.
func healthBound(services []resolvedService) time.Duration {
	var bound time.Duration
	for _, svc := range services {
		set := svc.Healthcheck.Settings()
		per := set.Interval + set.Timeout + healthGrace(set.Interval)
		bound = max(bound, set.StartPeriod+time.Duration(set.Retries+1)*per)
	}
	return bound + healthSlack
}

// awaitHealthy waits until every service of res with a health check is
// healthy (nil), one is unhealthy (*UnhealthyError), exited and kept down
// by its restart policy (*ServiceDownError), or still starting after
// healthBound (*HealthTimeoutError). It runs a service's check itself when
// none ran for its interval plus healthGrace (see the comment at the top
// of this file). A service already healthy returns at once, after one
// check when one is due, so a resync notices a check that started
// failing once Retries resyncs saw it fail.
func (r *Reconciler) awaitHealthy(ctx context.Context, e events.IntentEntry, res resolved) error {
	var checked []resolvedService
	for _, svc := range res.services {
		if svc.Healthcheck != nil {
			checked = append(checked, svc)
		}
	}
	if len(checked) == 0 {
		return nil
	}
	bound := healthBound(checked)
	deadline := time.Now().Add(bound)
	said := false
	for {
		wait := bound
		var starting string
		for _, svc := range checked {
			next, err := r.healthOf(ctx, e, res, svc)
			if err != nil {
				return err
			}
			if next > 0 {
				wait = min(wait, next)
				if starting == "" {
					starting = svc.Name
				}
			}
		}
		if starting == "" {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &HealthTimeoutError{Name: starting, Waited: bound}
		}
		if !said {
			r.log().InfoContext(ctx, "waiting for health checks", "deployment", e.Namespace+"/"+e.Name, "service", starting)
			said = true
		}
		t := time.NewTimer(max(min(wait, left), 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for the health check of service %s: %w", starting, ctx.Err())
		case <-t.C:
		}
	}
}

// healthOf looks at one service's health, running its check when one is
// due. It returns 0 when the service is healthy, else how long to wait
// before looking again, or the error that ends the wait.
func (r *Reconciler) healthOf(ctx context.Context, e events.IntentEntry, res resolved, svc resolvedService) (time.Duration, error) {
	set := svc.Healthcheck.Settings()
	c, err := r.rt().Inspect(ctx, svc.Name)
	if err != nil {
		return 0, fmt.Errorf("inspect service %s: %w", svc.Name, err)
	}
	if !r.owns(c, e.Namespace, e.Name) || c.Labels[LabelRevision] != res.revision {
		return 0, fmt.Errorf("service %s was replaced by another container while the agent waited for its health check", svc.Name)
	}
	switch {
	case c.State == runtime.StateExited && !restarts(restartPolicy(svc), failed(c)):
		return 0, &ServiceDownError{Name: svc.Name, ExitCode: c.ExitCode, RestartPolicy: restartPolicy(svc)}
	case c.State != runtime.StateRunning:
		return healthPoll, nil // being restarted (by its policy or the next pass)
	case c.Health == nil:
		return 0, fmt.Errorf("service %s: %w: the engine may not support health checks; remove the healthcheck or update the engine", svc.Name, ErrNoHealth)
	}
	interval := set.Interval + healthGrace(set.Interval)
	due := lastCheck(c).Add(interval)
	if now := time.Now(); !now.Before(due) {
		if err := r.rt().RunHealthCheck(ctx, c.ID); err != nil {
			if cur, ierr := r.rt().Inspect(ctx, c.ID); ierr == nil && cur.State != runtime.StateRunning {
				return healthPoll, nil // it stopped meanwhile: look again
			}
			return 0, fmt.Errorf("run the health check of service %s: %w", svc.Name, err)
		}
		if c, err = r.rt().Inspect(ctx, c.ID); err != nil {
			return 0, fmt.Errorf("inspect service %s: %w", svc.Name, err)
		}
		if c.Health == nil {
			return 0, fmt.Errorf("service %s: %w", svc.Name, ErrNoHealth)
		}
		due = now.Add(interval)
	}
	switch c.Health.Status {
	case runtime.HealthHealthy:
		return 0, nil
	case runtime.HealthUnhealthy:
		return 0, &UnhealthyError{Name: svc.Name, FailingStreak: c.Health.FailingStreak, ExitCode: c.Health.LastExitCode,
			Output: checkOutput(c.Health.LastOutput, secretValues(res))}
	}
	return max(time.Until(due), 10*time.Millisecond), nil
}

// lastCheck is when c's last check ended, or when c last started if that
// is later (or no check ran); zero when the runtime says neither.
func lastCheck(c runtime.Container) time.Time {
	t := c.StartedAt
	if c.Health != nil && c.Health.LastEnd.After(t) {
		t = c.Health.LastEnd
	}
	return t
}

// secretValues are the values of every secret_env of the resolved score.
func secretValues(res resolved) []string {
	var out []string
	add := func(svc resolvedService) {
		secret := map[string]bool{}
		for _, se := range svc.SecretEnv {
			secret[se.Name] = true
		}
		for _, v := range svc.env {
			if secret[v.Name] && v.Value != "" {
				out = append(out, v.Value)
			}
		}
	}
	if res.init != nil {
		add(*res.init)
	}
	for _, svc := range res.services {
		add(svc)
	}
	return out
}

// checkOutput makes a check's output fit a report: surrounding space
// trimmed, every secret value replaced by "***" (redactText), invalid
// UTF-8 replaced, at most maxHealthOutput characters. Error quotes it with
// %q, so control characters are escaped.
func checkOutput(out string, secrets []string) string {
	out, ok := redactText(strings.TrimSpace(out), secrets)
	if !ok {
		return withheldOutput
	}
	out = strings.ToValidUTF8(out, "\uFFFD")
	if r := []rune(out); len(r) > maxHealthOutput {
		out = string(r[:maxHealthOutput]) + "…"
	}
	return out
}

// withheldOutput stands for an output that may hold a secret value too
// short to replace.
const withheldOutput = "(withheld: it may hold a secret value)"

// redactText replaces every secret value in out by "***", longest first
// (a secret that holds another is replaced whole), also one cut at the
// end (the engine cuts a long output: Podman a check's at 500 bytes). ok
// is false when a value shorter than minRedacted appears in it, where
// replacing would not hide it: the whole text must be withheld.
func redactText(out string, secrets []string) (string, bool) {
	secrets = slices.Clone(secrets)
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	for _, s := range secrets {
		for k := len(s) - 1; k >= minRedacted; k-- {
			if strings.HasSuffix(out, s[:k]) {
				out = out[:len(out)-k] + "***"
				break
			}
		}
	}
	for _, s := range secrets {
		if s == "" || !strings.Contains(out, s) {
			continue
		}
		if utf8.RuneCountInString(s) < minRedacted {
			return "", false
		}
		out = strings.ReplaceAll(out, s, "***")
	}
	return out, true
}
