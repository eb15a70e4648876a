// The device page's Logs and Diagnosis pages (ADR 0025): a service's log
// read through the device's agent, followed live over server-sent events,
// and the agent's diagnosis. Reading is for fleet-admin (requireAdmin);
// every request is audited by devicelogs as the signed-in user.

package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
)

// Bounds of the Logs page.
const (
	// maxPageTail is the most lines the page asks for and shows without
	// JavaScript.
	maxPageTail = 1000
	// defaultPageTail is the tail the form starts with.
	defaultPageTail = 100
)

// logsData is the Logs page's data.
type logsData struct {
	Device fleetview.DeviceDetail
	// Choices are the device's "<deployment>/<service>" as it last
	// reported its containers.
	Choices []logChoice
	// Choice is the chosen one ("" none); Tail and Follow the options.
	Choice string
	Tail   int
	Follow bool
	// Lines are the lines read (without JavaScript, or before following);
	// Problem what went wrong; Unavailable when no reader is configured.
	Lines       []pageLine
	Read        bool
	Problem     string
	Unavailable bool
	// StreamURL is the server-sent events address of the choice.
	StreamURL string
}

// logChoice is one container of the device.
type logChoice struct{ Value, Label string }

// pageLine is one line as shown: its time and printable text.
type pageLine struct {
	Time string `json:"t"`
	Text string `json:"l"`
}

func linesOf(ls []events.LogLine) []pageLine {
	out := make([]pageLine, 0, len(ls))
	for _, l := range ls {
		t := ""
		if !l.Time.IsZero() {
			t = l.Time.UTC().Format(time.RFC3339)
		}
		out = append(out, pageLine{Time: t, Text: devicelogs.PrintableLine(l.Text)})
	}
	return out
}

// logsRequest reads the page's query: the device's namespace, the chosen
// "<deployment>/<service>", tail and follow.
func (s *Server) logsRequest(r *http.Request, dev fleetview.DeviceDetail) (devicelogs.Request, string, error) {
	q := r.URL.Query()
	choice := q.Get("container")
	tail := defaultPageTail
	if t := q.Get("tail"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 || n > maxPageTail {
			return devicelogs.Request{}, choice, fmt.Errorf("tail: give a number of lines from 0 to %d", maxPageTail)
		}
		tail = n
	}
	u, _ := s.session(r)
	req := devicelogs.Request{Namespace: dev.Namespace, Device: dev.ID, Tail: tail, Follow: q.Get("follow") == "1",
		Who: devicelogs.Who{User: u.User.Name, UserSubject: u.User.Subject, Via: events.ViaDashboard}}
	if choice == "" {
		return req, choice, nil
	}
	dep, svc, ok := strings.Cut(choice, "/")
	if !ok {
		return req, choice, errors.New("container: choose one of the device's containers")
	}
	req.Deployment, req.Service = dep, svc
	if err := req.Validate(); err != nil {
		return req, choice, errors.New("container: choose one of the device's containers")
	}
	return req, choice, nil
}

// adminOnly authorizes the signed-in fleet-admin (requireAdmin already
// checked the role; this says so in the audit's terms).
func (s *Server) adminOnly(r *http.Request) devicelogs.Authorizer {
	return devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error {
		if u, ok := s.session(r); ok && u.User.Admin {
			return nil
		}
		return fmt.Errorf("%w: reading logs on the dashboard is for %s", devicelogs.ErrDenied, "fleet-admin")
	})
}

// handleDeviceLogs is GET /devices/{id}/logs: the form, and without
// JavaScript (or before following) the lines read.
func (s *Server) handleDeviceLogs(w http.ResponseWriter, r *http.Request) {
	dev, err := s.o.View.Device(r.Context(), r.PathValue("id"))
	if err != nil {
		s.viewError(w, r, "device", err)
		return
	}
	d := logsData{Device: dev, Unavailable: s.o.Logs == nil}
	for _, wl := range dev.Workloads {
		for _, c := range wl.Containers {
			v := wl.Name + "/" + c.Name
			d.Choices = append(d.Choices, logChoice{Value: v, Label: wl.Namespace + "/" + v + " (" + c.Role + ")"})
		}
	}
	req, choice, err := s.logsRequest(r, dev)
	d.Choice, d.Tail, d.Follow = choice, req.Tail, req.Follow
	switch {
	case err != nil:
		d.Problem = err.Error()
	case choice != "" && s.o.Logs != nil:
		q := r.URL.Query()
		q.Set("follow", "1")
		d.StreamURL = "/devices/" + url.PathEscape(dev.ID) + "/logs/stream?" + q.Encode()
		if r.URL.Query().Get("read") == "1" {
			req.Follow = false
			d.Read = true
			d.Lines, err = s.readLogs(r.Context(), r, req)
			if err != nil {
				d.Problem = logsProblem(err)
			}
		}
	}
	p := s.base(r, "Logs of device "+dev.ID, "devices")
	p.Data = d
	s.render(w, r, http.StatusOK, "devicelogs", p)
}

// readLogs reads a log to its end.
func (s *Server) readLogs(ctx context.Context, r *http.Request, req devicelogs.Request) ([]pageLine, error) {
	st, err := s.o.Logs.Open(ctx, req, s.adminOnly(r))
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var out []pageLine
	for {
		ls, err := st.Next(ctx)
		out = append(out, linesOf(ls)...)
		if len(out) > maxPageTail {
			out = out[len(out)-maxPageTail:]
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// logsProblem is what the page says of a failed read.
func logsProblem(err error) string {
	switch {
	case errors.Is(err, devicelogs.ErrNoAnswer), errors.Is(err, devicelogs.ErrDeviceGone), errors.Is(err, devicelogs.ErrDenied),
		errors.Is(err, devicelogs.ErrTooManyStreams), errors.Is(err, devicelogs.ErrCutOff), errors.Is(err, devicelogs.ErrFollowLimit):
		return err.Error()
	}
	var de *devicelogs.DeviceError
	if errors.As(err, &de) {
		return de.Error()
	}
	return "the log could not be read: " + bounded(err.Error(), 300)
}

// handleDeviceLogsStream is GET /devices/{id}/logs/stream: server-sent
// events, "line" (a JSON pageLine) for each line, then "end" or "problem"
// (a JSON string). Closing the connection stops the device.
func (s *Server) handleDeviceLogsStream(w http.ResponseWriter, r *http.Request) {
	dev, err := s.o.View.Device(r.Context(), r.PathValue("id"))
	if err != nil {
		s.viewError(w, r, "device", err)
		return
	}
	if s.o.Logs == nil {
		http.Error(w, "reading device logs is not configured", http.StatusServiceUnavailable)
		return
	}
	req, choice, err := s.logsRequest(r, dev)
	if err == nil && choice == "" {
		err = errors.New("container: choose one of the device's containers")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	send := func(event string, v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b); err != nil {
			return false
		}
		fl.Flush()
		return true
	}
	ctx := r.Context()
	st, err := s.o.Logs.Open(ctx, req, s.adminOnly(r))
	if err != nil {
		send("problem", logsProblem(err))
		return
	}
	defer st.Close()
	for {
		ls, err := st.Next(ctx)
		for _, l := range linesOf(ls) {
			if !send("line", l) {
				return
			}
		}
		switch {
		case errors.Is(err, io.EOF):
			send("end", "the device ended the log")
			return
		case ctx.Err() != nil:
			return
		case err != nil:
			send("problem", logsProblem(err))
			return
		}
		if len(ls) == 0 {
			// A keep-alive: tell the browser the stream is alive.
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

// diagnosisData is the Diagnosis page's data.
type diagnosisData struct {
	Device    fleetview.DeviceDetail
	Diagnosis *diagnosisView
	Problem   string
}

// diagnosisView is a diagnosis with every device string made printable.
type diagnosisView struct {
	AgentVersion, Engine, Clock string
	Disk, Memory                string
	Containers                  []diagnosisContainer
	Truncated                   bool
	Passes                      []string
	Reports                     []string
}

type diagnosisContainer struct {
	Deployment, Name, Role, State, Exit, Health, Image, Ports string
	Restarts                                                  int
}

// handleDiagnosis is GET /devices/{id}/diagnosis: the agent's diagnosis.
func (s *Server) handleDiagnosis(w http.ResponseWriter, r *http.Request) {
	dev, err := s.o.View.Device(r.Context(), r.PathValue("id"))
	if err != nil {
		s.viewError(w, r, "device", err)
		return
	}
	d := diagnosisData{Device: dev}
	if s.o.Logs == nil {
		d.Problem = "reading devices is not configured on this dashboard"
	} else {
		u, _ := s.session(r)
		diag, err := s.o.Logs.Diagnose(r.Context(), devicelogs.Request{Namespace: dev.Namespace, Device: dev.ID,
			Who: devicelogs.Who{User: u.User.Name, UserSubject: u.User.Subject, Via: events.ViaDashboard}}, s.adminOnly(r))
		if err != nil {
			d.Problem = logsProblem(err)
		} else {
			d.Diagnosis = viewDiagnosis(diag)
		}
	}
	p := s.base(r, "Diagnosis of device "+dev.ID, "devices")
	p.Data = d
	s.render(w, r, http.StatusOK, "diagnosis", p)
}

func viewDiagnosis(d devicelogs.Diagnosis) *diagnosisView {
	pr := func(s string) string { return bounded(devicelogs.PrintableLine(s), fleetview.MaxFieldLength) }
	size := func(n uint64) string {
		switch {
		case n == 0:
			return "unknown"
		case n >= 1<<30:
			return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
		}
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	v := &diagnosisView{AgentVersion: pr(d.AgentVersion), Engine: pr(d.Engine), Clock: fmt.Sprintf("%+.3f s", d.ClockOffset.Seconds()),
		Disk: size(d.DiskFree) + " free of " + size(d.DiskTotal), Memory: size(d.MemAvailable) + " available of " + size(d.MemTotal),
		Truncated: d.Containers.Truncated}
	for _, wl := range d.Containers.Workloads {
		for _, c := range wl.Containers {
			exit := strconv.Itoa(c.ExitCode)
			if c.Signal != "" {
				exit += " (" + pr(c.Signal) + ")"
			}
			if c.OOMKilled {
				exit += ", OOM-killed"
			}
			v.Containers = append(v.Containers, diagnosisContainer{Deployment: pr(wl.Namespace + "/" + wl.Deployment), Name: pr(c.Name),
				Role: pr(c.Role), State: pr(c.State), Exit: exit, Health: pr(c.Health), Image: pr(c.ImageDigest), Restarts: c.Restarts,
				Ports: pr(strings.Join(d.Ports[wl.Namespace+"/"+wl.Deployment+"/"+c.Name], ", "))})
		}
	}
	for _, p := range d.Passes {
		v.Passes = append(v.Passes, fmt.Sprintf("%s: %s in %.2f s", p.At.UTC().Format(time.RFC3339), pr(p.Result), p.Seconds))
	}
	for _, ws := range d.Workloads {
		line := fmt.Sprintf("%s/%s generation %d: %s", pr(ws.Namespace), pr(ws.Deployment), ws.Generation, pr(string(ws.Phase)))
		if ws.Error != "" {
			line += ": " + pr(ws.Error)
		}
		v.Reports = append(v.Reports, line)
	}
	return v
}
