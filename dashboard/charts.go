package dashboard

import (
	"fmt"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// Charts are inline SVG drawn on the server: no script, no inline style
// (the Content-Security-Policy allows none; fills come from style.css
// classes). Each has a title and a description naming its figures, and the
// page shows the same figures as text or in a table.

// svgRect is one rectangle of a chart; Class picks its fill.
type svgRect struct {
	X, Y, W, H int
	Class      string
}

// svgText is one text of a chart.
type svgText struct {
	X, Y   int
	Anchor string
	Text   string
}

// svgChart is a chart as the template "chart" draws it: ID prefixes its
// title's and description's ids.
type svgChart struct {
	ID, Title, Desc string
	Width, Height   int
	Rects           []svgRect
	Texts           []svgText
}

const (
	progressLabelW = 110
	progressBarW   = 360
	progressRowH   = 30
	progressBarH   = 18
)

// newProgressChart is a rollout's progress: one bar per stage, its
// members split into succeeded, failed and pending.
func newProgressChart(stages []fleetview.StageProgress) svgChart {
	c := svgChart{ID: "progress", Title: "Rollout progress by stage", Width: progressLabelW + progressBarW + 290, Height: len(stages)*progressRowH + 8}
	desc := ""
	for i, s := range stages {
		y := 4 + i*progressRowH
		c.Texts = append(c.Texts, svgText{X: 0, Y: y + 14, Text: s.Name})
		c.Rects = append(c.Rects, svgRect{X: progressLabelW, Y: y, W: progressBarW, H: progressBarH, Class: "bar-frame"})
		x := progressLabelW
		for _, part := range []struct {
			n     int
			class string
		}{{s.Succeeded, "bar-ok"}, {s.Failed, "bar-bad"}, {s.Pending, "bar-pending"}} {
			if part.n == 0 || s.Size == 0 {
				continue
			}
			w := max(1, part.n*progressBarW/s.Size)
			w = min(w, progressLabelW+progressBarW-x)
			c.Rects = append(c.Rects, svgRect{X: x, Y: y, W: w, H: progressBarH, Class: part.class})
			x += w
		}
		line := fmt.Sprintf("%d of %d succeeded", s.Succeeded, s.Size)
		if s.Failed > 0 {
			line += fmt.Sprintf(", %d failed", s.Failed)
		}
		line += ": " + s.State
		c.Texts = append(c.Texts, svgText{X: progressLabelW + progressBarW + 8, Y: y + 14, Text: line})
		if desc != "" {
			desc += "; "
		}
		desc += s.Name + ": " + line
	}
	c.Desc = desc + "."
	return c
}

const (
	trendLeft   = 96
	trendPlotW  = 624
	trendPanelH = 90
	trendGap    = 40
)

// newTrendChart is the 24-hour trend: heartbeats per hour above, reports
// and failures per hour below.
func newTrendChart(tr fleetview.Trend) svgChart {
	n := len(tr.Hours)
	c := svgChart{ID: "trend", Title: "The last 24 hours, per hour", Width: trendLeft + trendPlotW + 16, Height: 2*trendPanelH + trendGap + 44}
	if n == 0 {
		c.Desc = "No hour counted yet."
		return c
	}
	slot := trendPlotW / n
	maxHB, maxRep := 0, 0
	totHB, totRep, totFail, partial := 0, 0, 0, 0
	for _, h := range tr.Hours {
		maxHB, maxRep = max(maxHB, h.Heartbeats), max(maxRep, h.Reports)
		totHB, totRep, totFail = totHB+h.Heartbeats, totRep+h.Reports, totFail+h.Failures
		if h.HeartbeatsPartial {
			partial++
		}
	}
	top1, top2 := 20, 20+trendPanelH+trendGap
	c.Texts = append(c.Texts,
		svgText{X: 0, Y: top1 - 6, Text: "Heartbeats"},
		svgText{X: trendLeft - 6, Y: top1 + 10, Anchor: "end", Text: fmt.Sprint(maxHB)},
		svgText{X: trendLeft - 6, Y: top1 + trendPanelH, Anchor: "end", Text: "0"},
		svgText{X: 0, Y: top2 - 6, Text: "Reports (failures)"},
		svgText{X: trendLeft - 6, Y: top2 + 10, Anchor: "end", Text: fmt.Sprint(maxRep)},
		svgText{X: trendLeft - 6, Y: top2 + trendPanelH, Anchor: "end", Text: "0"})
	c.Rects = append(c.Rects,
		svgRect{X: trendLeft, Y: top1 + trendPanelH, W: slot * n, H: 1, Class: "axis"},
		svgRect{X: trendLeft, Y: top2 + trendPanelH, W: slot * n, H: 1, Class: "axis"})
	height := func(v, m int) int {
		if v <= 0 || m <= 0 {
			return 0
		}
		return max(1, v*trendPanelH/m)
	}
	for i, h := range tr.Hours {
		x := trendLeft + i*slot + 1
		w := max(1, slot-2)
		class := "bar-hb"
		if h.HeartbeatsPartial {
			class = "bar-partial"
		}
		if hh := height(h.Heartbeats, maxHB); hh > 0 {
			c.Rects = append(c.Rects, svgRect{X: x, Y: top1 + trendPanelH - hh, W: w, H: hh, Class: class})
		}
		if hh := height(h.Reports, maxRep); hh > 0 {
			c.Rects = append(c.Rects, svgRect{X: x, Y: top2 + trendPanelH - hh, W: w, H: hh, Class: "bar-ok"})
		}
		if hh := height(h.Failures, maxRep); hh > 0 {
			c.Rects = append(c.Rects, svgRect{X: x, Y: top2 + trendPanelH - hh, W: w, H: hh, Class: "bar-bad"})
		}
		if i%6 == 0 {
			c.Texts = append(c.Texts, svgText{X: x, Y: top2 + trendPanelH + 18, Text: h.Start.UTC().Format("15:04")})
		}
	}
	last := tr.Hours[n-1].Start.UTC().Add(time.Hour)
	c.Texts = append(c.Texts, svgText{X: trendLeft + slot*n, Y: top2 + trendPanelH + 18, Anchor: "end", Text: last.Format("15:04") + " UTC"})
	c.Desc = fmt.Sprintf("%d hours from %s UTC: %d heartbeats (at most %d in an hour), %d reports of which %d failures (at most %d reports in an hour).",
		n, tr.Hours[0].Start.UTC().Format("2006-01-02 15:04"), totHB, maxHB, totRep, totFail, maxRep)
	if partial > 0 {
		c.Desc += fmt.Sprintf(" The heartbeats of the first %d hours are partial (lighter bars): they began before the dashboard started counting.", partial)
	}
	return c
}
