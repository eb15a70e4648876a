package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where a binary serves its metrics.
const Path = "/metrics"

// NewRegistry returns a registry with the Go runtime and process
// collectors (go_*, process_*), the base every binary registers its own
// metrics on.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Server serves Prometheus metrics over HTTP: each path the metrics of its
// gatherer, in the text exposition format (or OpenMetrics when asked).
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen binds addr (host:port; port 0 picks a free one) for the gatherers
// by path (Path for a binary's one set). Run serves them.
func Listen(addr string, paths map[string]prometheus.Gatherer) (*Server, error) {
	if len(paths) == 0 {
		return nil, errors.New("metrics: no path to serve: give at least one gatherer")
	}
	mux := http.NewServeMux()
	for p, g := range paths {
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("metrics: path %q: a path starts with /", p)
		}
		mux.Handle(p, promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s (give a free host:port, or port 0): %w", addr, err)
	}
	return &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}, nil
}

// Addr is the bound address (host:port).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the http URL of path on the server.
func (s *Server) URL(path string) string { return "http://" + s.Addr() + path }

// Run serves until ctx ends, then shuts the server down (in-flight scrapes
// get 5 s) and returns nil; an error when serving fails.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("metrics: serve on %s: %w", s.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("metrics: shut down %s: %w", s.Addr(), err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serve on %s: %w", s.Addr(), err)
	}
	return nil
}

// Family is a metric family a collector registers: its name, help and
// variable labels (sorted).
type Family struct {
	Name   string
	Help   string
	Labels []string
}

var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: ("(?:[^"\\]|\\.)*"), .*variableLabels: \{([^}]*)\}\}$`)

// Describe lists the families the collectors describe, sorted by name; an
// error names a description it cannot read.
func Describe(cs ...prometheus.Collector) ([]Family, error) {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []Family
	var errs []error
	for d := range ch {
		m := descRE.FindStringSubmatch(d.String())
		if m == nil {
			errs = append(errs, fmt.Errorf("metrics: a description that does not read: %s", d))
			continue
		}
		var f Family
		var err1, err2 error
		f.Name, err1 = strconv.Unquote(m[1])
		f.Help, err2 = strconv.Unquote(m[2])
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("metrics: %s: %w", d, err))
			continue
		}
		if m[3] != "" {
			for _, l := range strings.Split(m[3], ",") {
				f.Labels = append(f.Labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
			}
		}
		slices.Sort(f.Labels)
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out, errors.Join(errs...)
}
