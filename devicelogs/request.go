package devicelogs

import (
	"errors"
	"fmt"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Who is the person a request is read for, as the audit names them.
type Who struct {
	// User is the Kubernetes user name (fleet logs) or the signed-in
	// user's display name (dashboard).
	User string
	// UserSubject is the OIDC subject, when known.
	UserSubject string
	// Via is events.ViaCLI or events.ViaDashboard.
	Via string
}

// Request is what a reader asks for.
type Request struct {
	// Namespace and Device name the Device; Deployment and Service the
	// container (Service may name the init container).
	Namespace, Device, Deployment, Service string
	// Tail is how many last lines first (0: every line).
	Tail int
	// Since, when set, sends only lines printed at or after it.
	Since time.Time
	// Follow keeps the stream open for new lines, for at most
	// Options.MaxFollow.
	Follow bool
	// Who asks.
	Who Who
}

// Validate checks a request, naming the field and the fix.
func (r Request) Validate() error { return r.validate(false) }

// validate checks a request; a diagnosis names no Deployment or service.
func (r Request) validate(diagnose bool) error {
	var errs []error
	if err := events.ValidateToken(events.TokenNamespace, r.Namespace); err != nil {
		errs = append(errs, fmt.Errorf("namespace: %w", err))
	}
	if err := events.ValidateToken(events.TokenDevice, r.Device); err != nil {
		errs = append(errs, fmt.Errorf("device: %w", err))
	}
	switch {
	case diagnose && (r.Deployment != "" || r.Service != ""):
		errs = append(errs, errors.New("deployment, service: a diagnosis covers the whole device: leave them empty"))
	case !diagnose:
		if err := events.ValidateToken(events.TokenName, r.Deployment); err != nil {
			errs = append(errs, fmt.Errorf("deployment: %w", err))
		}
		if err := events.ValidateToken(events.TokenName, r.Service); err != nil {
			errs = append(errs, fmt.Errorf("service: %w", err))
		}
	}
	if r.Tail < 0 {
		errs = append(errs, fmt.Errorf("tail: %d is negative: give 0 (every line) or more", r.Tail))
	}
	if r.Who.User == "" {
		errs = append(errs, errors.New("who: name the user the logs are read for (the audit records them)"))
	}
	if r.Who.Via != events.ViaCLI && r.Who.Via != events.ViaDashboard {
		errs = append(errs, fmt.Errorf("who.via: %q is neither %q nor %q", r.Who.Via, events.ViaCLI, events.ViaDashboard))
	}
	if len(errs) > 0 {
		return fmt.Errorf("devicelogs: request: %w", errors.Join(errs...))
	}
	return nil
}
