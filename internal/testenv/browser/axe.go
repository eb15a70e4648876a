package browser

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/chromedp/chromedp"
)

// axeSource is axe-core, vendored from the npm registry (axe/README.md says
// which version and how to update it).
//
//go:embed axe/axe.min.js
var axeSource string

// AxeVersion is the vendored axe-core's version; a test checks it against
// the file's own header.
const AxeVersion = "4.14.1"

// Impacts axe-core gives a violation, least to most severe.
const (
	ImpactMinor    = "minor"
	ImpactModerate = "moderate"
	ImpactSerious  = "serious"
	ImpactCritical = "critical"
)

// Violation is one axe-core rule a page breaks.
type Violation struct {
	ID      string          `json:"id"`     // the rule, e.g. "image-alt"
	Impact  string          `json:"impact"` // minor, moderate, serious or critical
	Help    string          `json:"help"`   // what the rule asks for
	HelpURL string          `json:"helpUrl"`
	Nodes   []ViolationNode `json:"nodes"`
}

// ViolationNode is one element that breaks the rule.
type ViolationNode struct {
	Target  string `json:"target"` // CSS selector(s) of the element
	HTML    string `json:"html"`   // the element's opening tag, as axe shows it
	Summary string `json:"failureSummary"`
}

// String is the violation as a failure message shows it: the rule, its
// impact, what it asks for and every element that breaks it.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %s (%s)", v.ID, v.Impact, v.Help, v.HelpURL)
	for _, n := range v.Nodes {
		fmt.Fprintf(&b, "\n    at %s: %s", n.Target, clip(n.HTML))
		if s := strings.TrimSpace(n.Summary); s != "" {
			fmt.Fprintf(&b, "\n      %s", strings.ReplaceAll(s, "\n", "\n      "))
		}
	}
	return b.String()
}

// axeRun runs every axe-core rule on the whole document; it resolves to the
// violations, each element's target selectors joined (" >>> " across shadow
// roots, ", " for several).
const axeRun = `(async () => {
	const r = await axe.run(document, {resultTypes: ["violations"]});
	const sel = t => Array.isArray(t) ? t.join(" >>> ") : String(t);
	return r.violations.map(v => ({
		id: v.id, impact: v.impact || "", help: v.help, helpUrl: v.helpUrl,
		nodes: v.nodes.map(n => ({target: n.target.map(sel).join(", "), html: n.html, failureSummary: n.failureSummary || ""})),
	}));
})()`

// RunAxe runs axe-core on the page as it is now and returns the serious and
// critical violations (minor and moderate ones are left out). Ending ctx
// (any context) stops the run; the page's timeout bounds it too.
func (p *Page) RunAxe(ctx context.Context) ([]Violation, error) {
	all, err := p.runAxe(ctx)
	if err != nil {
		return nil, err
	}
	severe, _ := split(all)
	return severe, nil
}

// split parts violations into the serious and critical ones and the rest.
func split(all []Violation) (severe, lesser []Violation) {
	for _, v := range all {
		if v.Impact == ImpactSerious || v.Impact == ImpactCritical {
			severe = append(severe, v)
		} else {
			lesser = append(lesser, v)
		}
	}
	return severe, lesser
}

// runAxe returns every violation axe-core finds, whatever its impact.
func (p *Page) runAxe(ctx context.Context) ([]Violation, error) {
	rctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	ctx = rctx
	loaded, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`typeof window.axe !== "undefined"`))
	if err == nil && !loaded {
		// Runtime.evaluate is not subject to the page's Content-Security-Policy.
		_, err = chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](axeSource))
	}
	var vs []Violation
	if err == nil {
		vs, err = chromedp.Run(ctx, chromedp.Evaluate[[]Violation](axeRun, chromedp.EvalAwaitPromise))
	}
	if err != nil {
		return nil, fmt.Errorf("run axe-core %s: %w", AxeVersion, err)
	}
	return vs, nil
}

// CheckAccessibility fails the test when axe-core finds a serious or
// critical violation on the page; what names the page in the message. The
// minor and moderate ones are logged (rule and impact), not failed.
func (p *Page) CheckAccessibility(what string) {
	p.tb.Helper()
	all, err := p.runAxe(p.ctx)
	if err != nil {
		p.fail("%s: %v", what, err)
	}
	severe, lesser := split(all)
	if len(lesser) > 0 {
		var ids []string
		for _, v := range lesser {
			ids = append(ids, fmt.Sprintf("%s (%s, %d element(s))", v.ID, v.Impact, len(v.Nodes)))
		}
		p.tb.Logf("axe-core on %s: minor or moderate only: %s", what, strings.Join(ids, ", "))
	}
	if len(severe) > 0 {
		p.fail("%s", AxeReport(what, severe))
	}
}

// AxeReport is the failure message for violations found on the page what.
func AxeReport(what string, vs []Violation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "axe-core %s finds %d serious or critical accessibility violation(s) on %s:", AxeVersion, len(vs), what)
	for _, v := range vs {
		b.WriteString("\n  - ")
		b.WriteString(v.String())
	}
	return b.String()
}
