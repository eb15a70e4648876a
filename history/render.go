package history

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
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
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(a); err != nil {
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

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(c, "\t", " ")
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

func (tl *DeploymentTimeline) writeText(w io.Writer) error {
	fmt.Fprintf(w, "Deployment %s/%s\n", tl.Namespace, tl.Name)
	if s := tl.State; s != nil {
		state := fmt.Sprintf("now: revision %s (generation %d) %s, stage %s since %s: %s", s.RevisionID, s.Generation, s.Phase,
			s.Stage, timeText(s.Since), s.Message)
		if s.Deleted {
			state += " (Deployment deleted)"
		}
		fmt.Fprintln(w, state)
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
	fmt.Fprintf(w, "Device %s\n", tl.Device)
	hb := tl.Heartbeats
	if hb.Count == 0 {
		fmt.Fprintln(w, "heartbeats: none kept")
	} else {
		fmt.Fprintf(w, "heartbeats: %d kept, %s … %s, agent %s, uptime %s at the last\n", hb.Count, timeText(hb.First), timeText(hb.Last),
			strings.Join(hb.AgentVersions, ", "), hb.Uptime.Round(time.Second))
	}
	if tl.Inventory != nil {
		fmt.Fprintf(w, "inventory: %s\n", inventoryText(*tl.Inventory))
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
	fmt.Fprintln(w, "\nTIMELINE")
	t = newTable(w, "TIME", "EVENT", "TYPE", "SUMMARY")
	for _, e := range tl.Entries {
		t.row(timeText(e.Time), e.ID, string(e.Type), e.Summary)
	}
	return t.flush()
}

func (fs *FleetState) writeText(w io.Writer) error {
	fmt.Fprintf(w, "Fleet at %s\n", fs.At.Format(time.RFC3339Nano))
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
	return t.flush()
}
