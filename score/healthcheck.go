package score

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Health check defaults: Podman's, for a field the score leaves empty.
const (
	DefaultHealthInterval = 30 * time.Second
	DefaultHealthTimeout  = 30 * time.Second
	DefaultHealthRetries  = 3
)

// The health check's limits (the CRD's markers say the same).
const (
	maxHealthCommand       = 64
	maxHealthArgLength     = 1024
	maxHealthDurationChars = 32
	minHealthInterval      = time.Second
	maxHealthInterval      = time.Hour
	minHealthTimeout       = time.Second
	maxHealthTimeout       = 10 * time.Minute
	maxHealthStartPeriod   = time.Hour
	minHealthRetries       = 1
	maxHealthRetries       = 100
)

// durationRE is the CRD's pattern of a duration: Go's duration syntax
// without a sign, without a leading or trailing '.', in units ns, us, ms,
// s, m and h.
var durationRE = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`)

// HealthSettings is a validated Healthcheck with its defaults applied.
type HealthSettings struct {
	// Command is the exec form, as in the score.
	Command     []string
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	Retries     int
}

// Settings returns the check with its defaults applied. It expects a
// check that Validate accepted; a duration that does not parse counts as
// empty.
func (h Healthcheck) Settings() HealthSettings {
	d := func(s string, def time.Duration) time.Duration {
		if v, err := time.ParseDuration(s); err == nil && s != "" {
			return v
		}
		return def
	}
	out := HealthSettings{
		Command:     h.Command,
		Interval:    d(h.Interval, DefaultHealthInterval),
		Timeout:     d(h.Timeout, DefaultHealthTimeout),
		StartPeriod: d(h.StartPeriod, 0),
		Retries:     int(h.Retries),
	}
	if out.Retries == 0 {
		out.Retries = DefaultHealthRetries
	}
	return out
}

// healthcheck checks the health check of the service at field.
func (v *validator) healthcheck(field string, h Healthcheck) {
	f := field + ".command"
	switch n := len(h.Command); {
	case n == 0:
		v.add(f, "", `is empty: give the program to run and its arguments, e.g. ["/bin/sh", "-c", "wget -q -O /dev/null http://localhost:8080/healthz"]`)
	case n > maxHealthCommand:
		v.add(f, "", fmt.Sprintf("has %d entries: use at most %d", n, maxHealthCommand))
	case h.Command[0] == "":
		v.add(f+"[0]", "", "is empty: the first entry is the program to run")
	case h.Command[0] == "CMD" || h.Command[0] == "CMD-SHELL" || h.Command[0] == "NONE":
		v.add(f+"[0]", h.Command[0], `is Docker's marker, not a program: command is the exec form itself, drop the leading entry (for a shell, use ["/bin/sh", "-c", "…"])`)
	}
	for i, arg := range h.Command {
		if n := utf8.RuneCountInString(arg); n > maxHealthArgLength {
			v.add(f+"["+strconv.Itoa(i)+"]", "", fmt.Sprintf("is %d characters long: use at most %d", n, maxHealthArgLength))
		}
	}
	v.duration(field+".interval", h.Interval, minHealthInterval, maxHealthInterval)
	v.duration(field+".timeout", h.Timeout, minHealthTimeout, maxHealthTimeout)
	v.duration(field+".start_period", h.StartPeriod, 0, maxHealthStartPeriod)
	if h.Retries != 0 && (h.Retries < minHealthRetries || h.Retries > maxHealthRetries) {
		v.add(field+".retries", strconv.Itoa(int(h.Retries)), fmt.Sprintf("use %d to %d failed checks in a row (empty: %d)", minHealthRetries, maxHealthRetries, DefaultHealthRetries))
	}
}

// duration checks an optional duration string against its bounds.
func (v *validator) duration(field, s string, minD, maxD time.Duration) {
	if s == "" {
		return
	}
	fix := fmt.Sprintf("use a duration from %s to %s, like \"10s\" or \"1m30s\" (units ns, us, ms, s, m, h)", fmtDuration(minD), fmtDuration(maxD))
	if utf8.RuneCountInString(s) > maxHealthDurationChars || !durationRE.MatchString(s) {
		v.add(field, s, fix)
		return
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < minD || d > maxD {
		v.add(field, s, fix)
	}
}

// fmtDuration writes a bound the way a user writes it ("1h", not "1h0m0s").
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ValidateHealthcheck checks one health check as Validate checks a
// service's, naming its fields under field (e.g. "Services[0].Healthcheck"):
// for callers that build a score's services from their own types.
func ValidateHealthcheck(field string, h Healthcheck) error {
	var v validator
	v.healthcheck(field, h)
	return v.err()
}
