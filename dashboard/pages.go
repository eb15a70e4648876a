package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// page is what every template gets.
type page struct {
	Title string
	// Nav is the navigation entry of the page ("" none).
	Nav  string
	User User
	CSRF string
	Mock bool
	// Live names the page for the live-update stream; zero: no stream.
	Live fleetview.PageRef
	// AutoRefresh makes the page refresh itself every three seconds when
	// JavaScript is off (a running rollout, a command awaiting its
	// answer).
	AutoRefresh bool
	// Self is the page's own address (the Refresh link).
	Self string
	// Notice is a one-line confirmation; Problem a one-line error.
	Notice, Problem string
	// Return is where sign-in goes back to.
	Return string
	// ProviderLogout links to the provider's logout.
	ProviderLogout string
	// Message is the text of an error page.
	Message string
	// Missing marks the "not found" page of one device, Deployment or
	// TaskRun (Live names it): static/live.js loads the page again once
	// the object appears, as one applied a moment before the informer
	// cache had it does.
	Missing bool
	Data    any
}

func (s *Server) base(r *http.Request, title, nav string) page {
	p := page{Title: title, Nav: nav, Mock: s.o.Mock, Self: r.URL.RequestURI()}
	if sess, ok := s.session(r); ok {
		p.User, p.CSRF = sess.User, sess.CSRF
	}
	return p
}

// viewError answers a read model's error: 404, 400 naming the field, or
// 503.
func (s *Server) viewError(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.viewErrorOf(w, r, what, fleetview.PageRef{}, err)
}

// viewErrorOf is viewError for the page of one object (ref): its 404
// follows the object's live updates and shows it once it exists. An
// object a user applied a moment ago may not be in the informer cache
// yet; its page must not stay "not found" until reloaded.
func (s *Server) viewErrorOf(w http.ResponseWriter, r *http.Request, what string, ref fleetview.PageRef, err error) {
	switch {
	case errors.Is(err, fleetview.ErrNotFound):
		p := page{Title: what + " not found", Message: "There is no " + what + " of this name.", Live: ref, Missing: ref.Kind != ""}
		if p.Missing {
			p.Message += " This page shows it as soon as it exists."
		}
		s.render(w, r, http.StatusNotFound, "error", p)
	case errors.Is(err, fleetview.ErrInvalidQuery):
		s.errorPage(w, r, http.StatusBadRequest, "Invalid query", bounded(err.Error(), 512))
	default:
		s.log.Error("read model failed", "page", r.URL.Path, "err", err)
		s.errorPage(w, r, http.StatusServiceUnavailable, "Data unavailable", "The dashboard cannot read the fleet's state right now; try again in a moment.")
	}
}

// overviewData is the overview page.
type overviewData struct {
	Overview fleetview.Overview
	Alerts   []alertRow
	// AlertsError says why the alerts are missing.
	AlertsError string
	Trend       *fleetview.Trend
	// TrendError says why the trend is missing.
	TrendError string
}

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) {
	ov, err := s.o.View.Overview(r.Context())
	if err != nil {
		s.viewError(w, r, "overview", err)
		return
	}
	d := overviewData{Overview: ov}
	if rows, err := s.alertRows(r); err == nil {
		for _, a := range rows {
			if a.Ack == nil && len(d.Alerts) < 5 {
				d.Alerts = append(d.Alerts, a)
			}
		}
	} else {
		s.log.Warn("alerts unreadable", "err", err)
		d.AlertsError = "the alerts cannot be read right now"
	}
	if tr, err := s.o.View.Trend(r.Context()); err == nil {
		d.Trend = &tr
	} else {
		d.TrendError = "the trend is not available"
	}
	p := s.base(r, "Fleet overview", "overview")
	p.Live, p.Data = fleetview.PageRef{Kind: fleetview.PageOverview}, d
	s.render(w, r, http.StatusOK, "overview", p)
}

// devicesData is the device list page.
type devicesData struct {
	Query      fleetview.DeviceQuery
	Page       fleetview.DevicePage
	Liveness   []fleetview.Liveness
	Prev, Next string
	First      int
	Last       int
}

func (s *Server) handleDevices(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	dq := fleetview.DeviceQuery{Selector: q.Get("selector"), Liveness: fleetview.Liveness(q.Get("liveness")), Search: q.Get("q")}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			s.errorPage(w, r, http.StatusBadRequest, "Invalid query", "offset must be a whole number, 0 or more.")
			return
		}
		dq.Offset = n
	}
	p := s.base(r, "Devices", "devices")
	p.Live = fleetview.PageRef{Kind: fleetview.PageDevices}
	d := devicesData{Query: dq, Liveness: []fleetview.Liveness{fleetview.LivenessOnline, fleetview.LivenessStale, fleetview.LivenessOffline}}
	res, err := s.o.View.Devices(r.Context(), dq)
	switch {
	case errors.Is(err, fleetview.ErrInvalidQuery):
		p.Problem = bounded(err.Error(), 512)
		p.Data = d
		s.render(w, r, http.StatusBadRequest, "devices", p)
		return
	case err != nil:
		s.viewError(w, r, "device list", err)
		return
	}
	d.Page = res
	link := func(off int) string {
		v := url.Values{}
		for k, val := range map[string]string{"selector": dq.Selector, "liveness": string(dq.Liveness), "q": dq.Search} {
			if val != "" {
				v.Set(k, val)
			}
		}
		v.Set("offset", strconv.Itoa(off))
		return "/devices?" + v.Encode()
	}
	if res.Offset > 0 {
		d.Prev = link(max(0, res.Offset-res.Limit))
	}
	if res.Offset+len(res.Items) < res.Matched {
		d.Next = link(res.Offset + res.Limit)
	}
	d.First, d.Last = res.Offset+1, res.Offset+len(res.Items)
	p.Data = d
	s.render(w, r, http.StatusOK, "devices", p)
}

// deviceData is a device's page.
type deviceData struct {
	Device     fleetview.DeviceDetail
	Quarantine QuarantineStatus
	// QuarantineError says why the quarantine state could not be read.
	QuarantineError string
	Commands        []Command
	// CommandID is the command awaiting (or having) an answer; Result the
	// answer, nil while there is none.
	CommandID   string
	Result      *CommandResult
	ResultError string
}

func (s *Server) handleDevice(w http.ResponseWriter, r *http.Request) {
	dev, err := s.o.View.Device(r.Context(), r.PathValue("id"))
	if err != nil {
		s.viewErrorOf(w, r, "device", fleetview.PageRef{Kind: fleetview.PageDevice, Key: r.PathValue("id")}, err)
		return
	}
	d := deviceData{Device: dev, Commands: s.o.Commands}
	if qs, err := s.o.Actions.QuarantineStatus(r.Context(), dev.Namespace, dev.ID); err != nil {
		s.log.Warn("quarantine state unreadable", "device", dev.ID, "err", err)
		d.QuarantineError = "the quarantine state cannot be read right now"
		d.Quarantine = QuarantineStatus{Labelled: dev.Quarantined}
	} else {
		d.Quarantine = qs
		if !qs.Registered && qs.Identity == "" {
			d.Quarantine.Labelled = qs.Labelled || dev.Quarantined
		}
	}
	p := s.base(r, "Device "+dev.ID, "devices")
	p.Live = fleetview.PageRef{Kind: fleetview.PageDevice, Key: dev.ID}
	switch r.URL.Query().Get("done") {
	case "quarantined":
		p.Notice = "Device quarantined: the blacklist label is set."
	case "released":
		p.Notice = "Device released: the blacklist label is removed."
	}
	if id := r.URL.Query().Get("command"); id != "" {
		d.CommandID = bounded(id, 64)
		res, err := s.o.Actions.CommandResult(r.Context(), dev.ID, id)
		switch {
		case errors.Is(err, ErrInvalidInput):
			d.ResultError = "this is not a command id"
		case err != nil:
			s.log.Warn("command result unreadable", "device", dev.ID, "err", err)
			d.ResultError = "the command's result cannot be read right now"
		case res == nil:
			p.AutoRefresh = true
		default:
			// The device's text, whatever Actions gave it: escaped and cut.
			res.Command, res.Error = fleetview.Clean(res.Command, fleetview.MaxFieldLength), fleetview.Clean(res.Error, fleetview.MaxErrorLength)
			d.Result = res
		}
	}
	if d.Quarantine.Pending() {
		p.AutoRefresh = true
	}
	p.Data = d
	s.render(w, r, http.StatusOK, "device", p)
}

func (s *Server) handleQuarantine(quarantine bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sess, _ := s.session(r)
		if !s.checkCSRF(w, r, sess) {
			return
		}
		dev, err := s.o.View.Device(r.Context(), r.PathValue("id"))
		if err != nil {
			s.viewError(w, r, "device", err)
			return
		}
		if err := s.o.Actions.SetQuarantine(r.Context(), dev.Namespace, dev.ID, quarantine, sess.User); err != nil {
			s.actionError(w, r, err)
			return
		}
		done := "released"
		if quarantine {
			done = "quarantined"
		}
		http.Redirect(w, r, "/devices/"+url.PathEscape(dev.ID)+"?done="+done, http.StatusSeeOther)
	}
}

func (s *Server) handleCommand(w http.ResponseWriter, r *http.Request) {
	sess, _ := s.session(r)
	if !s.checkCSRF(w, r, sess) {
		return
	}
	name := r.PostFormValue("command")
	if !slices.ContainsFunc(s.o.Commands, func(c Command) bool { return c.Name == name }) {
		s.errorPage(w, r, http.StatusBadRequest, "Unknown command", "command must be one of the commands the device page offers.")
		return
	}
	dev, err := s.o.View.Device(r.Context(), r.PathValue("id"))
	if err != nil {
		s.viewError(w, r, "device", err)
		return
	}
	id, err := s.o.Actions.SendCommand(r.Context(), dev.Namespace, dev.ID, name, sess.User)
	if err != nil {
		s.actionError(w, r, err)
		return
	}
	http.Redirect(w, r, "/devices/"+url.PathEscape(dev.ID)+"?command="+url.QueryEscape(id), http.StatusSeeOther)
}

func (s *Server) actionError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		s.errorPage(w, r, http.StatusNotFound, "Device not found", "There is no such Device resource.")
	case errors.Is(err, ErrInvalidInput):
		s.errorPage(w, r, http.StatusBadRequest, "Invalid request", bounded(err.Error(), 512))
	default:
		s.log.Error("action failed", "path", r.URL.Path, "err", err)
		s.errorPage(w, r, http.StatusServiceUnavailable, "The action failed", "The change could not be made or recorded; check the device's page and try again.")
	}
}

func (s *Server) handleDeployments(w http.ResponseWriter, r *http.Request) {
	deps, err := s.o.View.Deployments(r.Context())
	if err != nil {
		s.viewError(w, r, "Deployment list", err)
		return
	}
	p := s.base(r, "Deployments", "deployments")
	p.Live, p.Data = fleetview.PageRef{Kind: fleetview.PageDeployments}, deps
	for _, d := range deps {
		if running(d.Phase) {
			p.AutoRefresh = true
		}
	}
	s.render(w, r, http.StatusOK, "deployments", p)
}

// running reports whether a Deployment phase is a rollout in progress.
func running(phase string) bool {
	return phase != "Succeeded" && phase != "Failed"
}

func (s *Server) handleDeployment(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	dep, err := s.o.View.Deployment(r.Context(), ns, name)
	if err != nil {
		s.viewErrorOf(w, r, "Deployment", fleetview.PageRef{Kind: fleetview.PageDeployment, Key: ns + "/" + name}, err)
		return
	}
	p := s.base(r, "Deployment "+ns+"/"+name, "deployments")
	p.Live, p.Data = fleetview.PageRef{Kind: fleetview.PageDeployment, Key: ns + "/" + name}, dep
	p.AutoRefresh = running(dep.Phase) && !dep.Deleted
	p.Notice = rolloutNotice(r.URL.Query())
	s.render(w, r, http.StatusOK, "deployment", p)
}

func (s *Server) handleTaskRuns(w http.ResponseWriter, r *http.Request) {
	trs, err := s.o.View.TaskRuns(r.Context())
	if err != nil {
		s.viewError(w, r, "TaskRun list", err)
		return
	}
	p := s.base(r, "TaskRuns", "taskruns")
	p.Live, p.Data = fleetview.PageRef{Kind: fleetview.PageTaskRuns}, trs
	s.render(w, r, http.StatusOK, "taskruns", p)
}

func (s *Server) handleTaskRun(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	tr, err := s.o.View.TaskRun(r.Context(), ns, name)
	if err != nil {
		s.viewErrorOf(w, r, "TaskRun", fleetview.PageRef{Kind: fleetview.PageTaskRun, Key: ns + "/" + name}, err)
		return
	}
	p := s.base(r, "TaskRun "+ns+"/"+name, "taskruns")
	p.Live, p.Data = fleetview.PageRef{Kind: fleetview.PageTaskRun, Key: ns + "/" + name}, tr
	s.render(w, r, http.StatusOK, "taskrun", p)
}

// alertRow is an alert with its acknowledgement.
type alertRow struct {
	fleetview.Alert
	Ack *Ack
}

func (s *Server) alertRows(r *http.Request) ([]alertRow, error) {
	alerts, err := s.o.View.Alerts(r.Context())
	if err != nil {
		return nil, err
	}
	acks, err := s.o.Acks.All(r.Context())
	if err != nil {
		return nil, err
	}
	rows := make([]alertRow, len(alerts))
	for i, a := range alerts {
		rows[i].Alert = a
		if ack, ok := acks[a.ID]; ok {
			rows[i].Ack = &ack
		}
	}
	return rows, nil
}

// MaxAlertsShown bounds the alerts page: the first ones in the read
// model's order (critical first, then newest).
const MaxAlertsShown = 500

// alertsData is the alerts page.
type alertsData struct {
	Rows  []alertRow
	Total int
}

func (s *Server) handleAlerts(w http.ResponseWriter, r *http.Request) {
	rows, err := s.alertRows(r)
	if err != nil {
		s.viewError(w, r, "alert list", err)
		return
	}
	p := s.base(r, "Alerts", "alerts")
	d := alertsData{Total: len(rows), Rows: rows}
	if len(rows) > MaxAlertsShown {
		d.Rows = rows[:MaxAlertsShown]
	}
	p.Live, p.Data = fleetview.PageRef{Kind: fleetview.PageAlerts}, d
	if r.URL.Query().Get("done") == "acknowledged" {
		p.Notice = "Alert acknowledged."
	}
	s.render(w, r, http.StatusOK, "alerts", p)
}

func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) {
	sess, _ := s.session(r)
	if !s.checkCSRF(w, r, sess) {
		return
	}
	if _, err := s.o.Acks.Acknowledge(r.Context(), r.PostFormValue("alert"), sess.User); err != nil {
		s.actionError(w, r, err)
		return
	}
	http.Redirect(w, r, "/alerts?done=acknowledged", http.StatusSeeOther)
}

// handleFleetAt is the fleet as it was at ?at= (RFC 3339): every device's
// desired and reported state and every Deployment's rollout, folded from the
// streams. Beyond the spec; the revision history links here.
func (s *Server) handleFleetAt(w http.ResponseWriter, r *http.Request) {
	raw := r.URL.Query().Get("at")
	at, err := time.Parse(time.RFC3339Nano, raw)
	if err != nil {
		s.errorPage(w, r, http.StatusBadRequest, "Invalid query", "at must be a time in RFC 3339 form, e.g. 2026-12-02T03:04:05Z.")
		return
	}
	fa, err := s.o.View.FleetAt(r.Context(), at)
	if err != nil {
		s.viewError(w, r, "fleet state", err)
		return
	}
	p := s.base(r, "The fleet as of "+at.UTC().Format("2006-01-02 15:04:05 UTC"), "")
	p.Data = fa
	s.render(w, r, http.StatusOK, "fleetat", p)
}
