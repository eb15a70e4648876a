package dev

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// The dashboard of fleet dev.
const (
	// DefaultDashboardPort is where fleet dev serves the dashboard when
	// the port is free (any free port otherwise), on loopback only.
	DefaultDashboardPort = 8280
	// DashboardUser is the development provider's human user with the
	// fleet-admin role; its password is new on every run.
	DashboardUser = "admin"
	// DashboardViewer is a human user with the read-only fleet-viewer
	// role (every page, no action); its password is new on every run, in
	// <data>/secrets/dashboard-viewer.password.
	DashboardViewer = "viewer"
	// dashboardClientID is the dashboard's web client at the development
	// provider.
	dashboardClientID = "fleet-dashboard"
	// dashboardPasswordFile is the file under <data>/secrets holding the
	// run's dashboard password (mode 0600).
	dashboardPasswordFile = "dashboard.password"
	// dashboardViewerPasswordFile holds DashboardViewer's password.
	dashboardViewerPasswordFile = "dashboard-viewer.password"
)

// startDashboard starts the dashboard on loopback: a human user
// DashboardUser with the fleet-admin role and a random password (and
// DashboardViewer with the read-only fleet-viewer role), a web
// client with a random secret at the development provider, a random
// session key, all for this run only; the dashboard serves in the plane's
// run group. It returns the dashboard's URL and the password.
func (s *session) startDashboard(ctx context.Context) (string, string, error) {
	op := s.plane.Provider()
	password, err := controlplane.RandomPassword()
	if err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard password: %w", err)
	}
	if _, err := op.CreateHumanUser(ctx, DashboardUser, password, dashboard.RoleAdmin); err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard user: %w", err)
	}
	file := filepath.Join(s.sec.dir, dashboardPasswordFile)
	if err := os.WriteFile(file, []byte(password+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("fleet dev: %s: %w", file, err)
	}
	viewerPassword, err := controlplane.RandomPassword()
	if err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard viewer password: %w", err)
	}
	if _, err := op.CreateHumanUser(ctx, DashboardViewer, viewerPassword, dashboard.RoleViewer); err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard viewer: %w", err)
	}
	file = filepath.Join(s.sec.dir, dashboardViewerPasswordFile)
	if err := os.WriteFile(file, []byte(viewerPassword+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("fleet dev: %s: %w", file, err)
	}
	secret, err := controlplane.RandomPassword()
	if err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard client secret: %w", err)
	}
	key := make([]byte, dashboard.SessionKeySize)
	if _, err := rand.Read(key); err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard session key: %w", err)
	}
	// Loopback only, whatever --listen says: plain http is acceptable
	// for the session cookie on loopback alone.
	ln, err := listenPreferring(DefaultListen, DefaultDashboardPort)
	if err != nil {
		return "", "", fmt.Errorf("fleet dev: dashboard: %w", err)
	}
	noteMoved(s.log, "dashboard", ln, DefaultDashboardPort)
	base := "http://" + net.JoinHostPort(DefaultListen, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if err := op.RegisterWebClient(devop.WebClient{ID: dashboardClientID, Secret: secret, RedirectURIs: []string{base + "/callback"},
		PostLogoutRedirectURIs: []string{base + "/signed-out"}}); err != nil {
		ln.Close()
		return "", "", fmt.Errorf("fleet dev: dashboard client: %w", err)
	}
	o := dashboard.FleetOptions{
		Server: dashboard.Options{Logger: s.log.With("component", "dashboard"), PublicURL: base, SessionKey: key,
			OIDC: &dashboard.OIDC{Issuer: op.Issuer(), ClientID: dashboardClientID, ClientSecret: secret},
			// Writes as the user: "oidc:admin" with the group fleet-admin.
			Kube: dashboard.KubeIdentity{UsernameClaim: "preferred_username", UsernamePrefix: "oidc:"}},
		RESTConfig: s.k.cfg, Store: s.plane.Store(), LogsMetrics: s.logs,
	}
	// The banner follows only once the dashboard serves (its record
	// logged): no startup record is printed after the banner.
	serving := make(chan struct{})
	o.Serving = func() { close(serving) }
	s.plane.Go("dashboard", func(ctx context.Context) error { return dashboard.RunFleet(ctx, o, ln) })
	select {
	case <-serving:
	case <-s.plane.Context().Done():
		return "", "", fmt.Errorf("fleet dev: the dashboard stopped before it served: %w", errors.Join(s.plane.Err(), context.Cause(s.plane.Context())))
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
	return base, password, nil
}
