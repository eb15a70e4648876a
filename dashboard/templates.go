package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// pageNames are the templates, each templates/<name>.html with the layout.
var pageNames = []string{"overview", "devices", "device", "deployments", "deployment", "taskruns", "taskrun", "alerts", "fleetat",
	"exposure", "forbidden", "error", "mocklogin", "signedout", "devicelogs", "diagnosis"}

type templates map[string]*template.Template

var funcs = template.FuncMap{
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":     func(t time.Time) string { return fleetview.Ago(t, time.Now()) },
	"dur":     fleetview.HumanDuration,
	"evname":  eventName,
	"href":    pageHref,
	"devhref": func(id string) string { return "/devices/" + url.PathEscape(id) },
	"nshref": func(kind, ns, name string) string {
		return "/" + kind + "/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
	},
	"title": func(s string) string {
		if s == "" {
			return s
		}
		return strings.ToUpper(s[:1]) + s[1:]
	},
	"phase": func(s string) string {
		if s == "" {
			return "not yet reconciled"
		}
		return s
	},
	"short":         func(s string, n int) string { return bounded(s, n) },
	"running":       running,
	"progresschart": newProgressChart,
	"trendchart":    newTrendChart,
	"fleetat": func(t time.Time) string {
		return "/fleet?" + url.Values{"at": {t.UTC().Format(time.RFC3339Nano)}}.Encode()
	},
}

// eventName writes an event type so that it breaks only after a dot or a
// hyphen (rollout.canaries-<wbr>converged), never inside a word.
func eventName(typ events.Type) template.HTML {
	var b strings.Builder
	for _, r := range string(typ) {
		b.WriteString(template.HTMLEscapeString(string(r)))
		if r == '.' || r == '-' {
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(`<code class="event">` + b.String() + `</code>`)
}

// pageHref is the address of a page a change or an alert names.
func pageHref(p fleetview.PageRef) string {
	nsName := func(kind string) string {
		ns, name, _ := strings.Cut(p.Key, "/")
		return "/" + kind + "/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
	}
	switch p.Kind {
	case fleetview.PageDevice:
		return "/devices/" + url.PathEscape(p.Key)
	case fleetview.PageDevices:
		return "/devices"
	case fleetview.PageDeployment:
		return nsName("deployments")
	case fleetview.PageDeployments:
		return "/deployments"
	case fleetview.PageTaskRun:
		return nsName("taskruns")
	case fleetview.PageTaskRuns:
		return "/taskruns"
	case fleetview.PageAlerts:
		return "/alerts"
	}
	return "/"
}

func parseTemplates() (templates, error) {
	t := templates{}
	for _, n := range pageNames {
		p, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/*_partial.html", "templates/"+n+".html")
		if err != nil {
			return nil, fmt.Errorf("dashboard: template %s: %w", n, err)
		}
		t[n] = p
	}
	return t, nil
}

// render writes page name with status. The page is rendered into a
// buffer first: a template error is a 500, never half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	if p.User.Name == "" {
		if sess, ok := s.session(r); ok {
			p.User, p.CSRF = sess.User, sess.CSRF
		}
	}
	p.Mock = s.o.Mock
	if p.Self == "" && r.Method == http.MethodGet {
		p.Self = r.URL.RequestURI()
	}
	var b bytes.Buffer
	if err := s.pages[name].Execute(&b, p); err != nil {
		s.log.Error("template failed", "template", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// errorPage renders an error page: a title and one sentence, no internals.
func (s *Server) errorPage(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	p := page{Title: title, Message: msg}
	s.render(w, r, status, "error", p)
}

func staticHandler() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded folder exists: a build without it does not compile
	}
	fsrv := http.StripPrefix("/static/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		fsrv.ServeHTTP(w, r)
	})
}
