package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Server is the dashboard's HTTP server. Create it with New; serve it with
// Run, or mount Handler in another server.
type Server struct {
	o       Options
	log     *slog.Logger
	public  *url.URL
	origin  string
	cookies cookies
	rp      *relyingParty
	revoked revoked
	pages   templates
	handler http.Handler
	feed    *feed
}

// New checks the options and returns a Server.
func New(o Options) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	pub, err := publicURL(o.PublicURL)
	if err != nil {
		return nil, err
	}
	sl, err := newSealer(o.SessionKey)
	if err != nil {
		return nil, err
	}
	tpl, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	s := &Server{o: o, log: o.Logger, public: pub, origin: pub.Scheme + "://" + pub.Host,
		cookies: cookies{secure: pub.Scheme == "https", sealer: sl}, pages: tpl, feed: newFeed()}
	if o.OIDC != nil {
		s.rp = &relyingParty{o: *o.OIDC, redirect: s.origin + "/callback"}
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the dashboard's HTTP handler. Live updates need Run (or
// RunFeed) running.
func (s *Server) Handler() http.Handler { return s.handler }

// RedirectURI is the OIDC redirect URI to register for the dashboard's
// client: PublicURL/callback.
func (s *Server) RedirectURI() string { return s.origin + "/callback" }

// PostLogoutRedirectURI is the URI to register for RP-initiated logout:
// PublicURL/signed-out.
func (s *Server) PostLogoutRedirectURI() string { return s.origin + "/signed-out" }

// RunFeed fans the view's change feed out to the live-update streams until
// ctx ends.
func (s *Server) RunFeed(ctx context.Context) error {
	for ch := range s.o.View.Changes(ctx) {
		s.feed.publish(ch)
	}
	return ctx.Err()
}

// Run serves on ln until ctx ends, then shuts down (open live-update
// streams are closed) and returns after every goroutine stopped. It owns
// ln.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	return s.run(ctx, ln, nil)
}

// run is Run; serving, when set, is called once the server accepts on ln,
// after its "dashboard serving" record.
func (s *Server) run(ctx context.Context, ln net.Listener, serving func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = s.RunFeed(ctx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("dashboard serving", "addr", ln.Addr().String(), "url", s.origin, "mock", s.o.Mock)
	if serving != nil {
		serving()
	}
	var err error
	select {
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = hs.Shutdown(sctx)
		scancel()
		<-errc
	case err = <-errc:
	}
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// Pages: fleet-admin or fleet-viewer. Actions that only the dashboard
	// can decide (NATS commands, acknowledgements, the quarantine label it
	// writes as itself): fleet-admin. Rollout controls: any signed-in
	// role, written as the user (impersonation): the API server decides.
	view := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.requireRole(h, false)) }
	admin := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.requireRole(h, true)) }
	view("GET /{$}", s.handleOverview)
	view("GET /devices", s.handleDevices)
	view("GET /devices/{id}", s.handleDevice)
	admin("POST /devices/{id}/quarantine", s.handleQuarantine(true))
	admin("POST /devices/{id}/release", s.handleQuarantine(false))
	admin("POST /devices/{id}/command", s.handleCommand)
	admin("GET /devices/{id}/logs", s.handleDeviceLogs)
	admin("GET /devices/{id}/logs/stream", s.handleDeviceLogsStream)
	admin("GET /devices/{id}/diagnosis", s.handleDiagnosis)
	view("GET /deployments", s.handleDeployments)
	view("GET /deployments/{ns}/{name}", s.handleDeployment)
	view("POST /deployments/{ns}/{name}/rollout", s.handleRolloutAction)
	view("GET /fleet", s.handleFleetAt)
	view("GET /exposure", s.handleExposure)
	view("GET /taskruns", s.handleTaskRuns)
	view("GET /taskruns/{ns}/{name}", s.handleTaskRun)
	view("GET /alerts", s.handleAlerts)
	admin("POST /alerts/ack", s.handleAck)
	view("GET /live", s.handleLive)
	mux.HandleFunc("GET /login", s.handleLogin)
	mux.HandleFunc("POST /login/mock", s.handleMockLogin)
	mux.HandleFunc("GET /callback", s.handleCallback)
	mux.HandleFunc("POST /logout", s.handleLogout)
	mux.HandleFunc("GET /signed-out", s.handleSignedOut)
	mux.Handle("GET /static/", staticHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.errorPage(w, r, http.StatusNotFound, "Page not found", "There is no page at this address.")
	})
	return s.logged(secureHeaders(mux))
}

// secureHeaders sets the headers every answer carries: a strict content
// security policy (no inline script or style, nothing from elsewhere), no
// framing, no sniffing, referrers only within the dashboard.
func secureHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status of an answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logged logs each request's method, path (never the query: the callback's
// carries the code and state) and status at debug level, and failures at
// info level.
func (s *Server) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		start := time.Now()
		next.ServeHTTP(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		level := slog.LevelDebug
		if sw.status >= 400 {
			level = slog.LevelInfo
		}
		s.log.Log(r.Context(), level, "request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "duration", time.Since(start).Round(time.Millisecond))
	})
}

type sessionKey struct{}

// session returns the request's valid session: the cookie opens with the
// key, has not expired and was not signed out.
func (s *Server) session(r *http.Request) (session, bool) {
	if sess, ok := r.Context().Value(sessionKey{}).(session); ok {
		return sess, true
	}
	var sess session
	if err := s.cookies.get(r, sessionCookie, &sess); err != nil {
		return session{}, false
	}
	if time.Now().After(sess.Expires) || s.revoked.has(sess.ID) {
		return session{}, false
	}
	return sess, true
}

// requireRole lets through requests of a session with the fleet-admin
// role, or (unless admin) the fleet-viewer role. Without a session, a GET
// goes to sign-in and anything else is refused; a session without the
// role gets 403 saying which role it needs.
func (s *Server) requireRole(next http.HandlerFunc, admin bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess, ok := s.session(r)
		if !ok {
			if r.Method == http.MethodGet && r.URL.Path != "/live" {
				http.Redirect(w, r, "/login?return="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.errorPage(w, r, http.StatusUnauthorized, "Sign in first", "Your session has ended. Sign in again.")
			return
		}
		ctx := context.WithValue(r.Context(), sessionKey{}, sess)
		r = r.WithContext(ctx)
		switch {
		case !sess.User.SeesPages():
			s.log.Info("refused: no fleet-admin or fleet-viewer role", "user", sess.User.Name, "user_subject", sess.User.Subject, "path", r.URL.Path)
			s.render(w, r, http.StatusForbidden, "forbidden", page{Title: "Access denied"})
			return
		case admin && !sess.User.Admin:
			s.log.Info("refused: a fleet-viewer asked for an action", "user", sess.User.Name, "user_subject", sess.User.Subject, "path", r.URL.Path)
			s.errorPage(w, r, http.StatusForbidden, "Read-only access",
				"You have the fleet-viewer role: you see every page but may change nothing. Actions need the fleet-admin role.")
			return
		}
		next(w, r)
	})
}

// sameOrigin reports whether a state-changing request comes from the
// dashboard's own pages: its Origin header, or without one its Referer,
// names the public URL's origin, and the browser does not call it
// cross-site.
func (s *Server) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" {
		return o == s.origin
	}
	ref, err := url.Parse(r.Header.Get("Referer"))
	if err != nil || ref.Host == "" {
		return false
	}
	return ref.Scheme+"://"+ref.Host == s.origin
}

// checkCSRF checks a state-changing request: same origin and the session's
// synchronizer token in the form field csrf. It answers 403 itself when
// the check fails.
func (s *Server) checkCSRF(w http.ResponseWriter, r *http.Request, sess session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if !s.sameOrigin(r) {
		s.log.Warn("refused: cross-origin state-changing request", "user", sess.User.Name, "path", r.URL.Path, "origin", bounded(r.Header.Get("Origin"), 128))
		s.errorPage(w, r, http.StatusForbidden, "Request refused", "The request did not come from this dashboard's pages.")
		return false
	}
	if !equalToken(r.PostFormValue("csrf"), sess.CSRF) {
		s.log.Warn("refused: missing or wrong CSRF token", "user", sess.User.Name, "path", r.URL.Path)
		s.errorPage(w, r, http.StatusForbidden, "Request refused", "The form is out of date or did not come from this dashboard. Reload the page and try again.")
		return false
	}
	return true
}
