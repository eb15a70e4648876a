package dashboard

import (
	"errors"
	"fmt"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// RoleAdmin is the project role that sees every page and may act; the
// dashboard answers 403 to a user with neither it nor RoleViewer.
const RoleAdmin = "fleet-admin"

// RoleViewer is the read-only project role: every page, no action (ADR
// 0022).
const RoleViewer = "fleet-viewer"

// RolesClaim is the id_token claim holding the user's project roles, as
// Zitadel names it: the claim the auth callout reads control-plane roles
// from, {"<role>": {"<org id>": "<org domain>"}, ...}.
const RolesClaim = "urn:zitadel:iam:org:project:roles"

// Defaults.
const (
	DefaultSessionLifetime = 8 * time.Hour
	// DefaultLoginTimeout bounds a sign-in: from /login to /callback.
	DefaultLoginTimeout = 10 * time.Minute
	// DefaultKeepAlive is how often a live-update stream sends a comment
	// to keep proxies from closing it.
	DefaultKeepAlive = 25 * time.Second
)

// OIDC configures sign-in with an OpenID Provider.
type OIDC struct {
	// Issuer is the provider's issuer URL (Zitadel's instance URL, the
	// development provider's issuer).
	Issuer string
	// ClientID and ClientSecret are the dashboard's web application
	// client. ClientSecret may be empty for a public client (PKCE only).
	ClientID     string
	ClientSecret string
	// Scopes asked besides openid and profile. Default: Zitadel's roles
	// scope, urn:zitadel:iam:org:project:roles.
	Scopes []string
}

// String never shows the client secret.
func (o OIDC) String() string {
	return fmt.Sprintf("OIDC{Issuer: %s, ClientID: %s, ClientSecret: %s}", o.Issuer, o.ClientID, redacted(o.ClientSecret))
}

// GoString never shows the client secret.
func (o OIDC) GoString() string { return o.String() }

func redacted(s string) string {
	if s == "" {
		return "(none)"
	}
	return "(redacted)"
}

// Options configure a Server.
type Options struct {
	// Logger receives the dashboard's records. Default: discard.
	Logger *slog.Logger
	// PublicURL is the URL users reach the dashboard at, without a path
	// (https://fleet.example.com). The OIDC redirect URI is
	// PublicURL/callback; state-changing requests must come from its
	// origin. https, or http on a loopback host (development only:
	// cookies are then not Secure). Required.
	PublicURL string
	// SessionKey seals the session and sign-in cookies: SessionKeySize
	// random bytes. Sessions survive a restart with the same key. Required.
	SessionKey []byte
	// SessionLifetime is how long a session lasts after sign-in. Default
	// DefaultSessionLifetime.
	SessionLifetime time.Duration
	// OIDC is the provider users sign in with. Required unless
	// MockSignIn.
	OIDC *OIDC
	// MockSignIn replaces sign-in with a labelled form that signs in a
	// mock user with or without the fleet-admin role. Only with Mock.
	MockSignIn bool
	// Mock says the data is generated (serve-web --mock): every page
	// shows a banner saying so.
	Mock bool
	// View is what pages show. Required.
	View fleetview.Source
	// Actions changes devices. Required.
	Actions Actions
	// Acks holds alert acknowledgements. Required.
	Acks Acks
	// Commands are the agent commands the device page offers. Default
	// DefaultCommands.
	Commands []Command
	// Logs reads device logs and diagnoses for the device page's Logs and
	// Diagnosis pages (ADR 0025); nil: the pages say it is not configured.
	Logs *devicelogs.Reader
	// KeepAlive is how often an idle live-update stream sends a comment.
	// Default DefaultKeepAlive.
	KeepAlive time.Duration
	// Kube maps a signed-in user to the Kubernetes user and groups the
	// dashboard impersonates for its writes (ADR 0022). The zero value
	// maps as a kube-apiserver with this OIDC issuer and default flags
	// does.
	Kube KubeIdentity
}

// KubeIdentity maps an id_token to the Kubernetes identity the API server
// gives the same user when it signs in with kubectl through the same OIDC
// issuer (--oidc-username-claim, --oidc-username-prefix; for the groups,
// an AuthenticationConfiguration mapping the project roles claim). The
// dashboard impersonates that identity, so the two must agree: configure
// both the same way (docs/dashboard.md, "Acting as the signed-in user").
type KubeIdentity struct {
	// UsernameClaim is the id_token claim holding the user name, as the
	// API server's --oidc-username-claim. Default "sub".
	UsernameClaim string
	// UsernamePrefix is put before the claim's value, as the API server's
	// --oidc-username-prefix: "" means the API server's default (the
	// issuer URL and "#" unless the claim is "email"), "-" no prefix.
	UsernamePrefix string
	// GroupsPrefix is put before each fleet project role the user holds
	// (fleet-admin, fleet-viewer) to name the Kubernetes group
	// impersonated with the user, as the API server's groups prefix.
	// Default none: the groups are fleet-admin and fleet-viewer, which the
	// ClusterRoleBindings of k8s/config/rbac name.
	GroupsPrefix string
}

// DefaultUsernameClaim is KubeIdentity's default username claim, the API
// server's.
const DefaultUsernameClaim = "sub"

// prefix is the prefix of Kubernetes user names for issuer.
func (k KubeIdentity) prefix(issuer string) string {
	switch {
	case k.UsernamePrefix == "-":
		return ""
	case k.UsernamePrefix != "":
		return k.UsernamePrefix
	case k.claim() == "email":
		return ""
	}
	return issuer + "#"
}

func (k KubeIdentity) claim() string {
	if k.UsernameClaim == "" {
		return DefaultUsernameClaim
	}
	return k.UsernameClaim
}

// Command is an agent command the device page offers.
type Command struct {
	// Name is the command sent (agent.CommandReconcileNow, ...).
	Name string
	// Label is the button's text; Help says what it does.
	Label, Help string
}

// DefaultCommands are the commands the agent knows (package agent's
// CommandReconcileNow and CommandReportInventory).
var DefaultCommands = []Command{
	{Name: "reconcile-now", Label: "Reconcile now", Help: "the agent reads its desired state and reconciles its workloads at once"},
	{Name: "report-inventory", Label: "Report inventory", Help: "the agent sends its inventory (operating system, architecture, kernel, agent version, labels) at once"},
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.SessionLifetime == 0 {
		o.SessionLifetime = DefaultSessionLifetime
	}
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.Commands == nil {
		o.Commands = DefaultCommands
	}
	if o.OIDC != nil && o.OIDC.Scopes == nil {
		c := *o.OIDC
		c.Scopes = []string{RolesClaim}
		o.OIDC = &c
	}
	o.PublicURL = strings.TrimSuffix(o.PublicURL, "/")
	return o
}

// Validate checks the options; the error names each wrong field and its fix.
func (o Options) Validate() error {
	o = o.withDefaults()
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, a...)...))
	}
	if _, err := publicURL(o.PublicURL); err != nil {
		errs = append(errs, err)
	}
	if len(o.SessionKey) != SessionKeySize {
		bad("the session key has %d bytes; it must have %d random bytes (head -c 32 /dev/urandom > session.key)", len(o.SessionKey), SessionKeySize)
	}
	if o.SessionLifetime < time.Minute {
		bad("the session lifetime %s is shorter than a minute", o.SessionLifetime)
	}
	switch {
	case o.MockSignIn && !o.Mock:
		bad("mock sign-in serves only mock data: set Mock too")
	case o.MockSignIn && o.OIDC != nil:
		bad("give either OIDC or mock sign-in, not both")
	case !o.MockSignIn && o.OIDC == nil:
		bad("OIDC is required: the issuer, client id and client secret of the dashboard's web application")
	case o.OIDC != nil:
		if u, err := url.Parse(o.OIDC.Issuer); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("the OIDC issuer %q is not an http(s) URL", o.OIDC.Issuer)
		}
		if o.OIDC.ClientID == "" {
			bad("the OIDC client id is empty: give the id of the dashboard's web application")
		}
	}
	if o.View == nil {
		bad("View is required")
	}
	if o.Actions == nil {
		bad("Actions is required")
	}
	if o.Acks == nil {
		bad("Acks is required")
	}
	if strings.HasPrefix(o.Kube.UsernamePrefix, "system:") || strings.HasPrefix(o.Kube.GroupsPrefix, "system:") {
		bad("the Kubernetes user and group prefixes must not start with \"system:\" (names the API server reserves): use e.g. \"oidc:\"")
	}
	if strings.ContainsFunc(o.Kube.UsernameClaim, func(r rune) bool { return r <= ' ' }) {
		bad("the Kubernetes username claim %q contains a space or control character: give a claim name such as sub or preferred_username", o.Kube.UsernameClaim)
	}
	for _, c := range o.Commands {
		if c.Name == "" || c.Label == "" {
			bad("every command needs a name and a label")
		}
	}
	return errors.Join(errs...)
}

// publicURL parses and checks the public URL; it says whether cookies are
// Secure.
func publicURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%w: the public URL %q must be a scheme and host with no path, e.g. https://fleet.example.com", ErrInvalidOptions, raw)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("%w: the public URL %q is plain http on a host that is not loopback: use https (cookies must be Secure); plain http is for 127.0.0.1, ::1 and localhost only",
				ErrInvalidOptions, raw)
		}
	default:
		return nil, fmt.Errorf("%w: the public URL %q must be https (or http on loopback)", ErrInvalidOptions, raw)
	}
	u.Path = ""
	return u, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
