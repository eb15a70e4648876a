// Package browser is the browser-test harness: it starts Debian's Chromium
// headless (the `chromium` found on PATH, never a browser a tool downloads),
// one process per test with a user-data folder of its own, and drives pages
// from Go through the DevTools protocol (chromedp): open a URL, wait for an
// element or a text (polling until a deadline), click, fill a form field,
// save a screenshot, and check a page with axe-core (vendored in axe/) for
// serious or critical accessibility violations.
//
// Every helper fails the test with a message that names what it waited for
// and what the page showed at the deadline. A machine without Chromium fails
// the test in CI and skips it elsewhere, naming `task setup:browser`
// (internal/testenv's policy).
//
// Screenshots go to the test's artifact folder (testing.T.ArtifactDir: kept
// under -outputdir with `go test -artifacts`); with FLEET_DOCS_SCREENSHOTS=1
// the ones a test marks for the documentation are also written to
// docs/dashboard/ at the repository root.
//
// Only tests import this package (internal/hygiene checks).
package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// SetupCommand installs the browser.
const SetupCommand = "go tool -modfile=tools/go.mod task setup:browser"

// Window size of every page: screenshots are this size.
const (
	Width  = 1280
	Height = 800
)

// DefaultTimeout is how long a helper waits for a page, an element or a text
// before it fails the test: generous, for a loaded machine.
const DefaultTimeout = 30 * time.Second

// DocsScreenshotsEnv names the environment variable that, set to a true
// boolean, makes DocScreenshot also write into docs/dashboard/.
const DocsScreenshotsEnv = "FLEET_DOCS_SCREENSHOTS"

// Flags are the Chromium command-line switches the harness starts the
// browser with (besides --user-data-dir and --window-size).
var Flags = []string{
	"headless", "no-sandbox", "disable-gpu", "disable-background-networking",
	"disable-component-update", "disable-sync", "no-first-run",
	"no-default-browser-check", "disable-dev-shm-usage", "hide-scrollbars",
	"mute-audio", "disable-extensions", "disable-default-apps",
	"disable-breakpad", "password-store=basic", "use-mock-keychain",
	"force-color-profile=srgb", "lang=en-US",
}

// Browser is one headless Chromium process, stopped when the test ends.
type Browser struct {
	tb  testing.TB
	ctx context.Context // the browser's first tab; parent of every Page
	out *bytes.Buffer   // Chromium's stdout and stderr
	mu  *sync.Mutex
}

// Start starts headless Chromium for tb and stops it (and removes its
// user-data folder) when tb ends.
func Start(tb testing.TB) *Browser {
	tb.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Missing(tb, "Chromium (the Debian package chromium)", SetupCommand, err)
	}
	out := &bytes.Buffer{}
	mu := &sync.Mutex{}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(Width, Height),
		chromedp.CombinedOutput(lockedWriter{mu, out}),
	}
	for _, f := range Flags {
		name, value, ok := strings.Cut(f, "=")
		if ok {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	tb.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the process to end
	})
	b := &Browser{tb: tb, ctx: ctx, out: out, mu: mu}
	// The first Run starts the process; it must not run under a timeout
	// (that would end the browser), so the deadline is enforced around it.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err = <-started:
	case <-time.After(2 * DefaultTimeout):
		err = fmt.Errorf("no answer after %s", 2*DefaultTimeout)
	}
	if err != nil {
		tb.Fatalf("start %s: %v\nChromium's output:\n%s", path, err, b.output())
	}
	return b
}

// output is the tail of Chromium's own output, for failure messages.
func (b *Browser) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.out.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Page is one browser tab. Its helpers fail the test (tb.Fatalf) on error,
// so call them from the goroutine of the test it reports to (see For).
type Page struct {
	tb      testing.TB
	b       *Browser
	ctx     context.Context
	timeout time.Duration
	shots   *int
	console *consoleLog
}

// consoleLog keeps the last messages of the tab's console and log: script
// errors, Content-Security-Policy refusals, console calls.
type consoleLog struct {
	mu   sync.Mutex
	msgs []string
}

const consoleKeep = 50

func (c *consoleLog) add(msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.msgs) == consoleKeep {
		c.msgs = slices.Delete(c.msgs, 0, 1)
	}
	c.msgs = append(c.msgs, clip(msg))
}

func (c *consoleLog) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// listen records the console of the tab: entries of the Log domain (which
// carry the browser's own refusals, such as a Content-Security-Policy
// violation), console calls and uncaught exceptions.
func (c *consoleLog) listen(ev any) {
	switch e := ev.(type) {
	case *cdplog.EventEntryAdded:
		if e.Entry != nil {
			c.add(fmt.Sprintf("[%s %s] %s %s", e.Entry.Source, e.Entry.Level, e.Entry.Text, e.Entry.URL))
		}
	case *cdpruntime.EventConsoleAPICalled:
		var parts []string
		for _, a := range e.Args {
			switch {
			case a == nil:
			case len(a.Value) > 0:
				parts = append(parts, string(a.Value))
			default:
				parts = append(parts, a.Description)
			}
		}
		c.add(fmt.Sprintf("[console %s] %s", e.Type, strings.Join(parts, " ")))
	case *cdpruntime.EventExceptionThrown:
		if d := e.ExceptionDetails; d != nil {
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg += " " + d.Exception.Description
			}
			c.add(fmt.Sprintf("[exception] %s %s:%d", msg, d.URL, d.LineNumber))
		}
	}
}

// Console returns the last messages (up to 50) of the tab's console: script
// errors, the browser's refusals (Content-Security-Policy) and console
// calls, oldest first.
func (p *Page) Console() []string { return p.console.list() }

// For returns the page reporting to tb (a subtest's t): the same tab, whose
// helpers then fail tb. The tab still closes when the test that opened it
// ends.
func (p *Page) For(tb testing.TB) *Page {
	q := *p
	q.tb = tb
	return &q
}

// NewPage opens a tab in its own browser context (cookies and storage apart
// from every other Page's), closed when tb ends.
func (b *Browser) NewPage(tb testing.TB) *Page {
	tb.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	tb.Cleanup(cancel)
	// The window's size includes the browser's own bars: the viewport is
	// set on the tab, so pages and screenshots are Width x Height.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(Width, Height)); err != nil {
		tb.Fatalf("open a tab: %v\nChromium's output:\n%s", err, b.output())
	}
	p := &Page{tb: tb, b: b, ctx: ctx, timeout: DefaultTimeout, shots: new(int), console: &consoleLog{}}
	if err := chromedp.Listen(ctx, p.console.listen); err != nil {
		tb.Fatalf("listen to the tab's console: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, cdplog.Enable, cdp.Empty{})
		return err
	})); err != nil {
		tb.Fatalf("enable the tab's log: %v", err)
	}
	return p
}

// SetTimeout sets how long the page's helpers wait (DefaultTimeout unless
// set).
func (p *Page) SetTimeout(d time.Duration) { p.timeout = d }

// fail ends the test with msg, the page's URL and a screenshot of what the
// page showed.
func (p *Page) fail(format string, args ...any) {
	p.tb.Helper()
	msg := fmt.Sprintf(format, args...)
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if url, err := chromedp.Run(ctx, chromedp.Location()); err == nil {
		msg += "\npage: " + url
	}
	*p.shots++
	name := fmt.Sprintf("failure-%d", *p.shots)
	if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
		if path, err := p.writeShot(name, png); err == nil {
			msg += "\nscreenshot: " + path
		}
	}
	if c := p.console.list(); len(c) > 0 {
		msg += "\nthe browser's console (last " + strconv.Itoa(len(c)) + "):\n  " + strings.Join(c, "\n  ")
	}
	p.tb.Fatal(msg)
}

// run runs a under the page's timeout.
func run[T any](p *Page, a chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	return chromedp.Run(ctx, a)
}

// Open loads url and waits for its load event; it returns the HTTP status of
// the document (after redirects).
func (p *Page) Open(url string) int {
	p.tb.Helper()
	resp, err := run(p, chromedp.NavigateResponse(url))
	if err != nil {
		p.fail("open %s: %v", url, err)
	}
	if resp == nil {
		return 0
	}
	return int(resp.Status)
}

// URL is the page's current address.
func (p *Page) URL() string {
	p.tb.Helper()
	u, err := run(p, chromedp.Location())
	if err != nil {
		p.fail("read the page's URL: %v", err)
	}
	return u
}

// WaitVisible waits until an element matching the CSS selector is visible
// (it has a box and is not hidden). It polls, so an element a live update
// replaces meanwhile counts.
func (p *Page) WaitVisible(selector string) {
	p.tb.Helper()
	js := `(() => { const e = document.querySelector(` + strconv.Quote(selector) + `); if (!e) return 0;
	const r = e.getBoundingClientRect(); return (r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden") ? 2 : 1 })()`
	state := 0
	err := testenv.Poll(p.ctx, p.timeout, func() bool {
		ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
		defer cancel()
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](js))
		state = n
		return err == nil && n == 2
	})
	switch {
	case err == nil:
	case state == 1:
		p.fail("timed out after %s waiting for %s to be visible: it is there but hidden or empty", p.timeout, selector)
	default:
		p.fail("timed out after %s waiting for %s to be visible: no element matches it", p.timeout, selector)
	}
}

// WaitText waits until the text of the first element matching selector
// contains text (the element may appear, and its text change, meanwhile). It
// returns the element's text.
func (p *Page) WaitText(selector, text string) string {
	p.tb.Helper()
	got, err := p.waitText(selector, text)
	if err != nil {
		p.fail("%v", err)
	}
	return got
}

// waitText polls the element's innerText until it contains text, and says
// at the deadline what the element held.
func (p *Page) waitText(selector, text string) (string, error) {
	var got string
	var found bool
	err := testenv.Poll(p.ctx, p.timeout, func() bool {
		got, found = p.textOf(selector)
		return found && strings.Contains(got, text)
	})
	if err == nil {
		return got, nil
	}
	if !found {
		return "", fmt.Errorf("timed out after %s waiting for %q in %s: no element matches %s", p.timeout, text, selector, selector)
	}
	return "", fmt.Errorf("timed out after %s waiting for %q in %s; its text at the deadline: %q", p.timeout, text, selector, clip(got))
}

// WaitMatch waits until the text of the first element matching selector
// matches the regular expression re and returns the submatches.
func (p *Page) WaitMatch(selector, re string) []string {
	p.tb.Helper()
	rx := regexp.MustCompile(re)
	var got string
	var found bool
	var m []string
	err := testenv.Poll(p.ctx, p.timeout, func() bool {
		got, found = p.textOf(selector)
		m = rx.FindStringSubmatch(got)
		return found && m != nil
	})
	switch {
	case err == nil:
		return m
	case !found:
		p.fail("timed out after %s waiting for /%s/ in %s: no element matches %s", p.timeout, re, selector, selector)
	default:
		p.fail("timed out after %s waiting for /%s/ in %s; its text at the deadline: %q", p.timeout, re, selector, clip(got))
	}
	return nil
}

// WaitGone waits until no element matches selector.
func (p *Page) WaitGone(selector string) {
	p.tb.Helper()
	err := testenv.Poll(p.ctx, p.timeout, func() bool {
		n, err := chromedp.Run(p.ctx, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(selector)+`).length`))
		return err == nil && n == 0
	})
	if err != nil {
		p.fail("timed out after %s waiting for %s to go away", p.timeout, selector)
	}
}

// Text returns the text of the first element matching selector, failing
// when there is none.
func (p *Page) Text(selector string) string {
	p.tb.Helper()
	s, ok := p.textOf(selector)
	if !ok {
		p.fail("no element matches %s", selector)
	}
	return s
}

// Count is how many elements match selector now.
func (p *Page) Count(selector string) int {
	p.tb.Helper()
	n, err := run(p, chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(selector)+`).length`))
	if err != nil {
		p.fail("count %s: %v", selector, err)
	}
	return n
}

// textOf is the innerText of the first element matching selector, and
// whether there is one.
func (p *Page) textOf(selector string) (string, bool) {
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[*string](`(() => { const e = document.querySelector(`+strconv.Quote(selector)+`); return e ? e.innerText : null })()`))
	if err != nil || s == nil {
		return "", false
	}
	return *s, true
}

// Click clicks the first element matching selector once it is visible.
// A page that replaces the element meanwhile (a live update) is clicked
// again on the new one.
func (p *Page) Click(selector string) {
	p.tb.Helper()
	if err := p.retryReplaced(func(ctx context.Context) error {
		_, err := chromedp.Run(ctx, chromedp.Click(chromedp.CSS(selector)))
		return err
	}); err != nil {
		p.fail("click %s: %v", selector, err)
	}
}

// ClickAndWaitLoad clicks selector (a link or a submit button) and waits for
// the page it leads to; it returns that document's HTTP status.
func (p *Page) ClickAndWaitLoad(selector string) int {
	p.tb.Helper()
	var resp *network.Response
	if err := p.retryReplaced(func(ctx context.Context) (err error) {
		resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(selector)))
		return err
	}); err != nil {
		p.fail("click %s and wait for the next page: %v", selector, err)
	}
	if resp == nil {
		return 0
	}
	return int(resp.Status)
}

// replaced reports whether err says the element went away between the
// query and the action: the page replaced it (a live update).
func replaced(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "Could not find node with given id") || strings.Contains(s, "No node with given id") ||
		strings.Contains(s, "Node is detached") || strings.Contains(s, "node not found")
}

// retryReplaced runs act under the page's deadline, again while it fails
// because the page replaced the element it acted on.
func (p *Page) retryReplaced(act func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	var err error
	if perr := testenv.Poll(ctx, p.timeout, func() bool {
		err = act(ctx)
		return !replaced(err)
	}); perr != nil && err == nil {
		err = perr
	}
	return err
}

// Fill types value into the form field matching selector, replacing what it
// held (key events, as a person would).
func (p *Page) Fill(selector, value string) {
	p.tb.Helper()
	if err := p.retryReplaced(func(ctx context.Context) error {
		_, err := chromedp.Run(ctx, chromedp.Steps(
			chromedp.Clear(chromedp.CSS(selector)),
			chromedp.SendKeys(chromedp.CSS(selector), value),
		))
		return err
	}); err != nil {
		p.fail("fill %s: %v", selector, err)
	}
}

// Select chooses the option with value in the <select> matching selector
// and fires its change event.
func (p *Page) Select(selector, value string) {
	p.tb.Helper()
	js := `(() => { const e = document.querySelector(` + strconv.Quote(selector) + `);
	if (!e) return "no element matches";
	if (![...e.options].some(o => o.value === ` + strconv.Quote(value) + `)) return "no option with that value";
	e.value = ` + strconv.Quote(value) + `; e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return "" })()`
	msg, err := run(p, chromedp.Evaluate[string](js))
	if err == nil && msg != "" {
		err = errors.New(msg)
	}
	if err != nil {
		p.fail("select %q in %s: %v", value, selector, err)
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its value
// into T.
func Eval[T any](p *Page, expr string) T {
	p.tb.Helper()
	v, err := run(p, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		p.fail("evaluate %s: %v", clip(expr), err)
	}
	return v
}

// Screenshot saves the viewport as <name>.png in the test's artifact folder
// and returns its path.
func (p *Page) Screenshot(name string) string {
	p.tb.Helper()
	png, err := run(p, chromedp.CaptureScreenshot())
	if err != nil {
		p.fail("screenshot %s: %v", name, err)
	}
	path, err := p.writeShot(name, png)
	if err != nil {
		p.tb.Fatalf("save screenshot %s: %v", name, err)
	}
	return path
}

// DocScreenshot is Screenshot for a picture docs/dashboard.md shows: with
// FLEET_DOCS_SCREENSHOTS=1 it also writes docs/dashboard/<name>.png.
func (p *Page) DocScreenshot(name string) string {
	p.tb.Helper()
	path := p.Screenshot(name)
	if v, err := strconv.ParseBool(os.Getenv(DocsScreenshotsEnv)); err != nil || !v {
		return path
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		p.tb.Fatalf("%s=1: find the repository root for docs/dashboard/: %v", DocsScreenshotsEnv, err)
	}
	png, err := os.ReadFile(path)
	if err != nil {
		p.tb.Fatal(err)
	}
	dst := filepath.Join(root, "docs", "dashboard", name+".png")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		p.tb.Fatal(err)
	}
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		p.tb.Fatalf("write %s: %v", dst, err)
	}
	p.tb.Logf("docs screenshot: %s", dst)
	return path
}

var badName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func (p *Page) writeShot(name string, png []byte) (string, error) {
	path := filepath.Join(p.tb.ArtifactDir(), badName.ReplaceAllString(name, "_")+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return "", err
	}
	p.tb.Logf("screenshot: %s", path)
	return path, nil
}

func clip(s string) string {
	const max = 600
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
