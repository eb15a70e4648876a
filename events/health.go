package events

import "time"

// Clip returns d within the bounds of the contract, every string made
// Printable: at most MaxHealthServices services, each with at most the last
// MaxHealthLogLines lines of logs (each at most MaxHealthLogLineRunes
// characters, MaxHealthServiceLogBytes in all) and every other string at
// most MaxHealthText bytes. A device may send anything: readers clip before
// they keep or show a report. The event type is kept.
func (d WorkloadHealth) Clip() WorkloadHealth {
	d.Namespace, d.Deployment, d.UID = clipText(d.Namespace), clipText(d.Deployment), clipText(d.UID)
	d.RevisionID, d.Reason = clipText(d.RevisionID), clipText(d.Reason)
	if len(d.Services) > MaxHealthServices {
		d.Services = d.Services[:MaxHealthServices]
	}
	svcs := make([]ServiceHealth, len(d.Services))
	for i, s := range d.Services {
		s.Name, s.State, s.Signal, s.Health = clipText(s.Name), clipText(s.State), clipText(s.Signal), clipText(s.Health)
		s.ExitedAt = cloneTime(s.ExitedAt)
		s.Logs = clipLogs(s.Logs)
		svcs[i] = s
	}
	if d.Services != nil {
		d.Services = svcs
	}
	return d
}

// Clip returns d within the bounds of the contract, every string made
// Printable: at most MaxContainerWorkloads workloads of at most
// MaxWorkloadContainers containers, every string at most MaxHealthText
// bytes. Truncated is set when Clip left something out.
func (d DeviceContainers) Clip() DeviceContainers {
	if len(d.Workloads) > MaxContainerWorkloads {
		d.Workloads, d.Truncated = d.Workloads[:MaxContainerWorkloads], true
	}
	ws := make([]WorkloadContainers, len(d.Workloads))
	for i, w := range d.Workloads {
		w.Namespace, w.Deployment, w.UID = clipText(w.Namespace), clipText(w.Deployment), clipText(w.UID)
		w.RevisionID, w.Degraded = clipText(w.RevisionID), clipText(w.Degraded)
		if len(w.Containers) > MaxWorkloadContainers {
			w.Containers, d.Truncated = w.Containers[:MaxWorkloadContainers], true
		}
		cs := make([]ContainerState, len(w.Containers))
		for j, c := range w.Containers {
			c.Name, c.Role, c.State, c.Signal = clipText(c.Name), clipText(c.Role), clipText(c.State), clipText(c.Signal)
			c.Health, c.ImageDigest = clipText(c.Health), clipText(c.ImageDigest)
			c.StartedAt, c.ExitedAt = cloneTime(c.StartedAt), cloneTime(c.ExitedAt)
			cs[j] = c
		}
		if w.Containers != nil {
			w.Containers = cs
		}
		ws[i] = w
	}
	if d.Workloads != nil {
		d.Workloads = ws
	}
	return d
}

func clipText(s string) string { return PrintableCut(s, MaxHealthText) }

// clipLogs keeps the last MaxHealthLogLines lines, each cut to
// MaxHealthLogLineRunes characters, and drops the oldest until they fit in
// MaxHealthServiceLogBytes.
func clipLogs(lines []string) []string {
	if len(lines) > MaxHealthLogLines {
		lines = lines[len(lines)-MaxHealthLogLines:]
	}
	if lines == nil {
		return nil
	}
	out := make([]string, len(lines))
	total := 0
	for i, l := range lines {
		out[i] = clipRunes(Printable(l), MaxHealthLogLineRunes)
		total += len(out[i])
	}
	for len(out) > 0 && total > MaxHealthServiceLogBytes {
		total -= len(out[0])
		out = out[1:]
	}
	return out
}

// clipRunes cuts s to at most n characters, the last being CutMarker when
// it was cut.
func clipRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n-1 {
			if len([]rune(s[j:])) > 1 {
				return s[:j] + CutMarker
			}
			return s
		}
		i++
	}
	return s
}

func cloneTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}
