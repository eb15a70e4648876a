package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/nationtech/harmony-fleet/events"
)

// Format is an output format.
type Format string

// Output formats.
const (
	// FormatText is human-readable tables.
	FormatText Format = "text"
	// FormatJSON is the answer's JSON form (indented), for scripts.
	FormatJSON Format = "json"
)

// ParseFormat parses an output format name; ErrUnknownFormat for anything
// but text and json.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case FormatText, FormatJSON:
		return Format(s), nil
	}
	return "", fmt.Errorf("%w %q: use text or json", ErrUnknownFormat, s)
}

// Answer is what a History query returns: *DeploymentTimeline,
// *TaskRunTimeline, *DeviceTimeline or *FleetState.
type Answer interface {
	writeText(w io.Writer) error
}

// Write renders an answer in format f.
func Write(w io.Writer, a Answer, f Format) error {
	switch f {
	case FormatJSON:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(a); err != nil {
			return fmt.Errorf("history: write json: %w", err)
		}
		if _, err := w.Write(jsonEscapeInvisible(b.Bytes())); err != nil {
			return fmt.Errorf("history: write json: %w", err)
		}
		return nil
	case FormatText, "":
		if err := a.writeText(w); err != nil {
			return fmt.Errorf("history: write text: %w", err)
		}
		return nil
	}
	return fmt.Errorf("%w %q: use text or json", ErrUnknownFormat, f)
}

// jsonEscapeInvisible returns the JSON text js with DEL and every character
// past ASCII that events.Invisible names written as a \u escape (a
// surrogate pair past U+FFFF). encoding/json escapes C0 controls, U+2028
// and U+2029 but leaves DEL, C1 controls and bidirectional and zero-width
// characters raw, which a terminal showing the output would act on. Such characters
// are only ever inside a string, where the escape decodes to the same
// character: the answer a script decodes is unchanged.
func jsonEscapeInvisible(js []byte) []byte {
	raw := func(r rune) bool { return r == 0x7f || r >= utf8.RuneSelf && events.Invisible(r) }
	if !bytes.ContainsFunc(js, raw) {
		return js
	}
	out := make([]byte, 0, len(js)+64)
	for len(js) > 0 {
		r, n := utf8.DecodeRune(js)
		switch {
		case raw(r):
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		default:
			out = append(out, js[:n]...)
		}
		js = js[n:]
	}
	return out
}

// timeText is how every text table shows a time: UTC with milliseconds.
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// table writes tab-separated rows aligned.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

// row writes one row. A cell may hold a device's text (an error, a
// summary quoting one, an agent version): every character that is
// invisible or a control, a line feed, a carriage return and a terminal
// escape sequence's ESC included, is shown as an escape (events.Printable),
// so a cell is one line and nothing in it reaches the terminal raw.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = events.Printable(strings.ReplaceAll(c, "\t", " "))
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// line writes a line that may quote a device's text, escaped as a cell is.
func line(w io.Writer, format string, a ...any) {
	fmt.Fprintln(w, events.Printable(fmt.Sprintf(format, a...)))
}

func (tl *DeploymentTimeline) writeText(w io.Writer) error {
	line(w, "Deployment %s/%s", tl.Namespace, tl.Name)
	if s := tl.State; s != nil {
		state := fmt.Sprintf("now: revision %s (generation %d) %s, stage %s since %s: %s", s.RevisionID, s.Generation, s.Phase,
			s.Stage, timeText(s.Since), s.Message)
		if s.Deleted {
			state += " (Deployment deleted)"
		}
		line(w, "%s", state)
	}
	fmt.Fprintln(w, "\nREVISIONS")
	t := newTable(w, "GEN", "REVISION", "CREATED", "TARGETS", "CANARIES", "EVENT")
	for _, r := range tl.Revisions {
		t.row(fmt.Sprint(r.Generation), r.RevisionID, timeText(r.Created), list(r.Targets), list(r.Canaries), r.ID)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nRESULTS (latest report per target and revision)")
	t = newTable(w, "GEN", "DEVICE", "ROLE", "PHASE", "SINCE", "REPORTS", "ERROR")
	for _, r := range tl.Revisions {
		for _, d := range r.Results {
			role := "target"
			if d.Canary {
				role = "canary"
			}
			t.row(fmt.Sprint(r.Generation), d.Device, role, dash(string(d.Phase)), timeText(d.Since), fmt.Sprint(d.Reports), dash(d.Error))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	if err := writeDegraded(w, "DEGRADED NOW (devices whose last health report of the current revision is Degraded)", tl.Degraded, false); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nTIMELINE")
	t = newTable(w, "TIME", "EVENT", "TYPE", "GEN", "STAGE", "SUMMARY")
	for _, e := range tl.Entries {
		sum := e.Summary
		if e.Ignored != "" {
			sum += " (ignored: " + e.Ignored + ")"
		}
		t.row(timeText(e.Time), e.ID, string(e.Type), genText(e.Generation), dash(string(e.Stage)), sum)
	}
	return t.flush()
}

func genText(g int64) string {
	if g == 0 {
		return "-"
	}
	return fmt.Sprint(g)
}

func (tl *DeviceTimeline) writeText(w io.Writer) error {
	line(w, "Device %s", tl.Device)
	hb := tl.Heartbeats
	if hb.Count == 0 {
		fmt.Fprintln(w, "heartbeats: none kept")
	} else {
		line(w, "heartbeats: %d kept, %s … %s, agent %s, uptime %s at the last", hb.Count, timeText(hb.First), timeText(hb.Last),
			strings.Join(hb.AgentVersions, ", "), hb.Uptime.Round(time.Second))
	}
	if tl.Inventory != nil {
		line(w, "inventory: %s", inventoryText(*tl.Inventory))
	}
	fmt.Fprintln(w, "\nDESIRED NOW")
	t := newTable(w, "DEPLOYMENT", "GEN", "REVISION", "SCORE")
	for _, e := range tl.Intent {
		t.row(e.Namespace+"/"+e.Name, fmt.Sprint(e.Generation), e.RevisionID, e.ScoreDigest)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(tl.Tasks) > 0 {
		fmt.Fprintln(w, "\nTASKS NOW")
		t = newTable(w, "TASKRUN", "TASK", "UID")
		for _, e := range tl.Tasks {
			t.row(e.Namespace+"/"+e.TaskRun, e.Task, e.UID)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if err := writeDegraded(w, "DEGRADED NOW (Deployments whose last health report is Degraded)", tl.Degraded, true); err != nil {
		return err
	}
	if err := writeContainers(w, tl.Containers); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nTIMELINE")
	t = newTable(w, "TIME", "EVENT", "TYPE", "SUMMARY")
	for _, e := range tl.Entries {
		t.row(timeText(e.Time), e.ID, string(e.Type), e.Summary)
	}
	return t.flush()
}

func (fs *FleetState) writeText(w io.Writer) error {
	fmt.Fprintf(w, "Fleet at %s\n", fs.At.Format(time.RFC3339Nano))
	fmt.Fprintf(w, "degraded devices: %d\n", fs.DegradedDevices)
	fmt.Fprintln(w, "\nDEPLOYMENTS")
	t := newTable(w, "DEPLOYMENT", "GEN", "REVISION", "PHASE", "STAGE", "SUCCEEDED", "FAILED", "PENDING", "CANARIES", "SINCE", "MESSAGE")
	for _, d := range fs.Deployments {
		phase := d.Phase
		if d.Deleted {
			phase = "Deleted"
		}
		t.row(d.Namespace+"/"+d.Name, fmt.Sprint(d.Generation), d.RevisionID, phase, dash(string(d.Stage)),
			fmt.Sprintf("%d/%d", d.Counts.Succeeded, d.Counts.Total), fmt.Sprint(d.Counts.Failed), fmt.Sprint(d.Counts.Pending),
			fmt.Sprintf("%d/%d", d.Counts.CanariesSucceeded, d.Counts.Canaries), timeText(d.Since), d.Message)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nDEVICES (desired: the fleet-intent value then; reported: the latest workload report then)")
	t = newTable(w, "DEVICE", "DEPLOYMENT", "DESIRED", "REPORTED", "PHASE", "SINCE", "ERROR")
	for _, d := range fs.Devices {
		rows := map[string][2]string{} // deployment → desired, reported generation
		var order []string
		for _, e := range d.Desired {
			k := e.Namespace + "/" + e.Name
			rows[k] = [2]string{fmt.Sprintf("%d (%s)", e.Generation, e.RevisionID), ""}
			order = append(order, k)
		}
		reports := map[string]Report{}
		for _, r := range d.Reported {
			k := r.Namespace + "/" + r.Deployment
			reports[k] = r
			if _, ok := rows[k]; !ok {
				order = append(order, k)
			}
			v := rows[k]
			v[1] = fmt.Sprintf("%d (%s)", r.Generation, r.RevisionID)
			rows[k] = v
		}
		slices.Sort(order)
		if len(order) == 0 {
			t.row(d.Device, "-", "-", "-", "-", "-", "-")
		}
		for _, k := range order {
			r, ok := reports[k]
			phase, since := "-", "-"
			if ok {
				phase, since = string(r.Phase), timeText(r.Since)
			}
			t.row(d.Device, k, dash(rows[k][0]), dash(rows[k][1]), phase, since, dash(r.Error))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	var degraded []HealthState
	for _, d := range fs.Devices {
		degraded = append(degraded, d.Degraded...)
	}
	return writeDegraded(w, "DEGRADED (the last health report then of each Deployment's current revision)", degraded, false)
}

// writeDegraded writes a table of Degraded states under title, nothing
// when there is none. byDeployment: a device's table (the Deployment first).
func writeDegraded(w io.Writer, title string, states []HealthState, byDeployment bool) error {
	if len(states) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\n"+title)
	t := newTable(w, "DEVICE", "DEPLOYMENT", "GEN", "REASON", "SINCE", "SUMMARY")
	if byDeployment {
		t = newTable(w, "DEPLOYMENT", "GEN", "REASON", "SINCE", "SUMMARY")
	}
	for _, s := range states {
		if byDeployment {
			t.row(s.Deployment, fmt.Sprint(s.Generation), s.Reason, timeText(s.Since), s.Summary)
		} else {
			t.row(s.Device, s.Deployment, fmt.Sprint(s.Generation), s.Reason, timeText(s.Since), s.Summary)
		}
	}
	return t.flush()
}

// writeContainers writes a device's last container report, nothing when
// it sent none.
func writeContainers(w io.Writer, s *ContainersSnapshot) error {
	if s == nil {
		return nil
	}
	title := fmt.Sprintf("\nCONTAINERS (as the device reported them at %s)", timeText(s.Stored))
	if s.Truncated {
		title += " (truncated)"
	}
	fmt.Fprintln(w, title)
	t := newTable(w, "DEPLOYMENT", "GEN", "CONTAINER", "ROLE", "STATE", "RESTARTS", "LAST EXIT", "HEALTH", "IMAGE", "DEGRADED")
	for _, wl := range s.Workloads {
		for _, c := range wl.Containers {
			t.row(wl.Namespace+"/"+wl.Deployment, fmt.Sprint(wl.Generation), c.Name, dash(c.Role), dash(c.State), fmt.Sprint(c.Restarts),
				exitText(c), dash(c.Health), dash(c.ImageDigest), dash(wl.Degraded))
		}
	}
	return t.flush()
}

// exitText is a container's last exit: "-" when it never exited.
func exitText(c events.ContainerState) string {
	if c.ExitedAt == nil && c.ExitCode == 0 && c.Signal == "" && !c.OOMKilled {
		return "-"
	}
	s := fmt.Sprintf("code %d", c.ExitCode)
	if c.Signal != "" {
		s += " (" + c.Signal + ")"
	}
	if c.OOMKilled {
		s += " OOM-killed"
	}
	if c.ExitedAt != nil {
		s += " at " + timeText(*c.ExitedAt)
	}
	return s
}
