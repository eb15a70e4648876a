// The size of what the agent reports: every report fits the streams
// devices write (events.MaxReportData), so none is refused and lost.

package agent

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// maxInventoryText bounds the os and kernel strings the agent reads for
// its inventory (the operator keeps 256 bytes of each).
const maxInventoryText = 256

// ErrReportTooLarge: a report cannot be fitted to the report streams; it
// is not sent (the stream would refuse it).
var ErrReportTooLarge = errors.New("report too large for the report streams")

// buildReport builds the message of one report, fitted to the report
// streams: error texts are cut to events.MaxReportError (their beginning
// kept); a task status still over events.MaxReportData keeps the first
// package changes that fit, then the end of its output; an inventory the
// labels that fit, in key order. The rest of a report is bounded by
// construction (names are tokens, phases constants).
func buildReport(keys events.Keys, data events.Data, opts ...events.Option) (*nats.Msg, error) {
	data = cutErrors(data)
	for range 4 {
		ev, err := events.New(keys, data, opts...)
		if err != nil {
			return nil, fmt.Errorf("build report: %w", err)
		}
		m, err := events.Message(ev)
		if err != nil {
			return nil, fmt.Errorf("encode report: %w", err)
		}
		if len(m.Data) <= events.MaxReportData {
			return m, nil
		}
		smaller, ok := shrink(data, len(m.Data)-events.MaxReportData)
		if !ok {
			break
		}
		data = smaller
	}
	return nil, fmt.Errorf("%w: a %s report does not fit in %d bytes", ErrReportTooLarge, data.EventType(), events.MaxReportData)
}

// cutErrors cuts the error text of a report to events.MaxReportError.
func cutErrors(data events.Data) events.Data {
	switch d := data.(type) {
	case events.WorkloadStatus:
		d.Error = cutText(d.Error, events.MaxReportError)
		return d
	case events.TaskStatus:
		d.Error = cutText(d.Error, events.MaxReportError)
		return d
	case events.CommandResult:
		d.Error = cutText(d.Error, events.MaxReportError)
		return d
	}
	return data
}

// shrink takes at least excess encoded bytes off a task status or an
// inventory; ok is false for other reports, or when nothing is left to
// take.
func shrink(data events.Data, excess int) (events.Data, bool) {
	excess += 64 // the encoding of what is left may move a few bytes
	switch d := data.(type) {
	case events.TaskStatus:
		n := len(d.Changes)
		for n > 0 && excess > 0 {
			n--
			c := d.Changes[n]
			excess -= len(c.Package) + len(c.From) + len(c.To) + len(`{"package":"","from":"","to":""},`)
		}
		if n < len(d.Changes) {
			d.Changes = slices.Clip(d.Changes[:n])
			return d, true
		}
		if d.Output == "" {
			return d, false
		}
		d.Output = keepEnd(d.Output, len(d.Output)-excess)
		return d, true
	case events.DeviceInventory:
		if len(d.Labels) == 0 {
			return d, false
		}
		keys := slices.Sorted(maps.Keys(d.Labels))
		n := len(keys)
		for n > 0 && excess > 0 {
			n--
			excess -= len(keys[n]) + len(d.Labels[keys[n]]) + len(`"":"",`)
		}
		labels := make(map[string]string, n)
		for _, k := range keys[:n] {
			labels[k] = d.Labels[k]
		}
		d.Labels = labels
		return d, true
	}
	return data, false
}

// cutText keeps the beginning of s, at most max bytes with "…", cut on a
// rune boundary.
func cutText(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len("…")
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// keepEnd keeps the end of s, at most max bytes, starting on a rune
// boundary.
func keepEnd(s string, max int) string {
	if max <= 0 {
		return ""
	}
	if len(s) <= max {
		return s
	}
	i := len(s) - max
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
