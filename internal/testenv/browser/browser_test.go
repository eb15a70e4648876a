package browser

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// serve answers every path in pages with its HTML.
func serve(t *testing.T, pages map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

const accessible = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Fleet</title></head>
<body><header><h1>Fleet</h1></header><main>
<p id="status">ready</p>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=" alt="a dot">
<form><label for="name">Name</label> <input id="name" name="name"> <button type="button" id="go">Go</button></form>
<p id="out"></p>
<script>document.getElementById("go").addEventListener("click", () => {
	document.getElementById("out").textContent = "hello " + document.getElementById("name").value;
});
setTimeout(() => { document.getElementById("status").textContent = "rollout 3/3"; }, 300);</script>
</main></body></html>`

// inaccessible breaks two rules axe-core rates serious or critical: an
// image without alt text (image-alt, critical) and a form field without a
// label (label, critical); and one it rates moderate (no <main> landmark
// holding the content: region).
const inaccessible = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Broken</title></head>
<body><img id="logo" src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<form><input id="q" name="q"></form></body></html>`

func TestAnAccessiblePageHasNoSeriousViolation(t *testing.T) {
	t.Parallel()
	url := serve(t, map[string]string{"/": accessible})
	p := Start(t).NewPage(t)
	if status := p.Open(url + "/"); status != http.StatusOK {
		t.Fatalf("status %d", status)
	}
	vs, err := p.RunAxe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) > 0 {
		t.Fatal(AxeReport("the accessible page", vs))
	}
	p.CheckAccessibility("the accessible page")
}

func TestAnImageWithoutAltAndAFieldWithoutLabelAreReported(t *testing.T) {
	t.Parallel()
	url := serve(t, map[string]string{"/": inaccessible})
	p := Start(t).NewPage(t)
	p.Open(url + "/")
	vs, err := p.RunAxe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, v := range vs {
		ids = append(ids, v.ID)
		if v.Impact != ImpactSerious && v.Impact != ImpactCritical {
			t.Errorf("RunAxe returned %s with impact %q; it keeps serious and critical only", v.ID, v.Impact)
		}
	}
	for _, want := range []string{"image-alt", "label"} {
		if !slices.Contains(ids, want) {
			t.Errorf("violations %q lack %s", ids, want)
		}
	}
	report := AxeReport("the broken page", vs)
	for _, want := range []string{"image-alt (critical)", "#logo", "#q", "Images must have alternative text", "https://dequeuniversity.com/rules/axe/"} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	t.Log(report)

	// The moderate ones exist but are left out.
	all, err := p.runAxe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(all) <= len(vs) {
		t.Errorf("axe found %d violations in all, %d serious or critical: the page was meant to have a moderate one too", len(all), len(vs))
	}
}

func TestWaitingForTextFollowsThePageAndFormsWork(t *testing.T) {
	t.Parallel()
	url := serve(t, map[string]string{"/": accessible})
	p := Start(t).NewPage(t)
	p.Open(url + "/")
	// The status changes 300 ms after the load: WaitText polls.
	if got := p.WaitText("#status", "rollout 3/3"); got != "rollout 3/3" {
		t.Errorf("WaitText returned %q", got)
	}
	if m := p.WaitMatch("#status", `rollout (\d+)/(\d+)`); m[1] != "3" {
		t.Errorf("WaitMatch returned %q", m)
	}
	p.Fill("#name", "pi-042")
	p.Click("#go")
	p.WaitText("#out", "hello pi-042")
	if n := p.Count("img"); n != 1 {
		t.Errorf("Count(img) = %d, want 1", n)
	}
}

func TestWaitingForTextThatNeverAppearsFailsAtTheDeadline(t *testing.T) {
	t.Parallel()
	url := serve(t, map[string]string{"/": accessible})
	p := Start(t).NewPage(t)
	p.Open(url + "/")
	p.SetTimeout(time.Second)
	_, err := p.waitText("#status", "rollout 4/3")
	if err == nil {
		t.Fatal("waiting for a text that never appears succeeded")
	}
	for _, want := range []string{"timed out after 1s", `"rollout 4/3"`, "#status", "its text at the deadline:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}
	_, err = p.waitText("#nothing", "x")
	if err == nil || !strings.Contains(err.Error(), "no element matches #nothing") {
		t.Errorf("waiting in an element that does not exist: %v, want it named", err)
	}
}

func TestAScreenshotIsAPNGOfTheWindowSize(t *testing.T) {
	t.Parallel()
	url := serve(t, map[string]string{"/": accessible})
	p := Start(t).NewPage(t)
	p.Open(url + "/")
	path := p.Screenshot("accessible page")
	if !strings.HasSuffix(path, "accessible_page.png") {
		t.Errorf("path %s: want the name made file-safe", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
	if cfg.Width != Width || cfg.Height != Height {
		t.Errorf("screenshot is %dx%d, want %dx%d", cfg.Width, cfg.Height, Width, Height)
	}
}

func TestTheVendoredAxeIsTheVersionRecorded(t *testing.T) {
	head := axeSource[:min(len(axeSource), 200)]
	if !strings.Contains(head, "axe v"+AxeVersion+"\n") {
		t.Errorf("axe/axe.min.js starts %q; AxeVersion is %s: update both (axe/README.md)", head, AxeVersion)
	}
	readme, err := os.ReadFile("axe/README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "axe-core@"+AxeVersion) {
		t.Errorf("axe/README.md does not name axe-core@%s", AxeVersion)
	}
}
