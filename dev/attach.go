package dev

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/enroll"
	"github.com/nationtech/harmony-fleet/internal/procfs"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// A real device (a Raspberry Pi on the same network) attaches to a running
// fleet dev: fleet dev listens on Options.Listen and puts the address a
// device reaches (Options.Advertise) into every URL it prints and writes,
// the provider's issuer above all (the callout checks the id_tokens' iss
// against it); it writes those URLs to <data>/endpoints.json, where `fleet
// enroll --dev` finds them, the kubeconfig and the provider's management
// token.

// DefaultListen is where fleet dev listens unless told otherwise: loopback
// only, so nothing of it is reachable from the network.
const DefaultListen = "127.0.0.1"

// EndpointsFile is the file in the data folder that describes the running
// fleet dev (Endpoints).
const EndpointsFile = "endpoints.json"

// Endpoints are where a running fleet dev is reached, as `fleet enroll
// --dev` reads them from <data>/endpoints.json (written, mode 0600, once
// everything is up). They hold no secret: the provider's management token
// is in the file IDPTokenFile names.
type Endpoints struct {
	// PID is the fleet dev process that wrote the file.
	PID int `json:"pid"`
	// Listen is the host NATS, the provider and the OpenBao stand-in
	// listen on (Options.Listen).
	Listen string `json:"listen"`
	// Advertise is the host in the URLs below (Options.Advertise, or the
	// address fleet dev chose).
	Advertise string `json:"advertise"`
	// NATSURL is the URL devices connect to.
	NATSURL string `json:"natsURL"`
	// Issuer is the development OpenID Provider's issuer URL, also the base
	// URL of its management API.
	Issuer string `json:"issuer"`
	// Audience is the audience of its id_tokens.
	Audience string `json:"audience"`
	// IDPTokenFile holds the token of the provider's management API (mode
	// 0600), which enrollment needs.
	IDPTokenFile string `json:"idpTokenFile"`
	// OpenBaoAddr is the OpenBao stand-in's address; OpenBaoRole the JWT
	// role devices log in with; OpenBaoDevicePrefix the KV path of their
	// pull credentials (fleet-agent's --openbao-* flags).
	OpenBaoAddr         string `json:"openbaoAddr"`
	OpenBaoRole         string `json:"openbaoRole"`
	OpenBaoDevicePrefix string `json:"openbaoDevicePrefix"`
	// OpenBaoTokenFile holds the stand-in's root token (mode 0600), with
	// which BindDevice binds an attached device to OpenBaoRole.
	OpenBaoTokenFile string `json:"openbaoTokenFile"`
	// Namespace holds the Device resources.
	Namespace string `json:"namespace"`
	// Kubeconfig is the admin kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// PodmanSocket is the Podman API socket fleet dev drives (its URI);
	// "" without Podman. `fleet enroll --dev` prints it in the agent's
	// command line.
	PodmanSocket string `json:"podmanSocket,omitempty"`
}

// ErrNotRunning means no fleet dev runs on the data folder, or it has not
// finished starting: `fleet enroll --dev` needs it running (it enrolls
// through the running provider's management API).
var ErrNotRunning = errors.New("fleet dev is not running")

// ReadEndpoints reads the Endpoints of the fleet dev running on dataDir;
// ErrNotRunning when none runs there or it is still starting.
func ReadEndpoints(dataDir string) (Endpoints, error) {
	path := filepath.Join(dataDir, EndpointsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Endpoints{}, fmt.Errorf("%w on --data-dir %s (no %s): start `fleet dev --data-dir %s` first", ErrNotRunning, dataDir, EndpointsFile, dataDir)
	}
	if err != nil {
		return Endpoints{}, fmt.Errorf("fleet dev: read %s: %w", path, err)
	}
	var ep Endpoints
	if err := json.Unmarshal(b, &ep); err != nil {
		return Endpoints{}, fmt.Errorf("fleet dev: %s is not fleet dev's endpoints file: %w (start fleet dev again to rewrite it)", path, err)
	}
	owner, err := os.ReadFile(filepath.Join(dataDir, "run", "owner"))
	pid, perr := strconv.Atoi(strings.TrimSpace(string(owner)))
	switch {
	case err != nil || perr != nil || !procfs.Alive(pid):
		return Endpoints{}, fmt.Errorf("%w on --data-dir %s: start `fleet dev --data-dir %s` (it must run while devices enroll)", ErrNotRunning, dataDir, dataDir)
	case pid != ep.PID:
		return Endpoints{}, fmt.Errorf("%w yet on --data-dir %s: process %d is starting; try again once it prints \"fleet dev is running\"", ErrNotRunning, dataDir, pid)
	}
	return ep, nil
}

// writeEndpoints writes <data>/endpoints.json (mode 0600, by an atomic
// rename).
func writeEndpoints(dataDir string, ep Endpoints) error {
	b, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return fmt.Errorf("fleet dev: endpoints: %w", err)
	}
	if err := writeSecretFile(filepath.Join(dataDir, EndpointsFile), string(b)); err != nil {
		return fmt.Errorf("fleet dev: %w: check that --data-dir is writable", err)
	}
	return nil
}

// previousPorts are the provider's and the stand-in's ports of the last run
// on dataDir when it listened on the same host and advertised the same one
// (0: none), so that the URLs a device was given stay the same across runs.
func previousPorts(dataDir, listen, advertise string) (provider, bao int) {
	b, err := os.ReadFile(filepath.Join(dataDir, EndpointsFile))
	if err != nil {
		return 0, 0
	}
	var ep Endpoints
	if json.Unmarshal(b, &ep) != nil || ep.Listen != listen || ep.Advertise != advertise {
		return 0, 0
	}
	return urlPort(ep.Issuer), urlPort(ep.OpenBaoAddr)
}

// urlPort is the port of a URL; 0 when it has none.
func urlPort(u string) int {
	pu, err := url.Parse(u)
	if err != nil {
		return 0
	}
	p, _ := strconv.Atoi(pu.Port())
	return p
}

// listenPreferring listens on host at the first of ports that is not 0
// and free, else on a free port of host.
func listenPreferring(host string, ports ...int) (net.Listener, error) {
	for _, port := range ports {
		if port <= 0 {
			continue
		}
		if ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err == nil {
			return ln, nil
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen on --listen %s: %w", host, err)
	}
	return ln, nil
}

// advertisedURL is scheme://advertise:<the listener's port>.
func advertisedURL(scheme, advertise string, ln net.Listener) string {
	return scheme + "://" + net.JoinHostPort(advertise, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
}

// hostnameRE is what --advertise accepts besides an IP address.
var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// checkHosts checks the syntax of --listen and --advertise, and that a
// device could reach the advertised host.
func checkHosts(listen, advertise string) error {
	var errs []error
	lip := net.ParseIP(cmp.Or(listen, DefaultListen))
	if lip == nil {
		errs = append(errs, fmt.Errorf("fleet dev: --listen %q: give an IP address of this machine (127.0.0.1, the default; 0.0.0.0 for every interface; or one of its addresses)", listen))
	}
	if advertise == "" {
		return errors.Join(errs...)
	}
	aip := net.ParseIP(advertise)
	switch {
	case aip == nil && !hostnameRE.MatchString(advertise):
		errs = append(errs, fmt.Errorf("fleet dev: --advertise %q: give the host name or IP address a device reaches this machine at (no scheme, no port)", advertise))
	case aip != nil && aip.IsUnspecified():
		errs = append(errs, fmt.Errorf("fleet dev: --advertise %s: a device cannot connect to an unspecified address: give one of this machine's addresses", advertise))
	case lip != nil && lip.IsLoopback() && advertise != "localhost" && (aip == nil || !aip.IsLoopback()):
		errs = append(errs, fmt.Errorf("fleet dev: --advertise %s with --listen %s: nothing listens where a device would connect: pass --listen 0.0.0.0 (or that address) too",
			advertise, cmp.Or(listen, DefaultListen)))
	}
	return errors.Join(errs...)
}

// iface is a network interface as advertiseHost sees it.
type iface struct {
	flags net.Flags
	addrs []net.Addr
}

// interfaces are this machine's interfaces, in index order.
func interfaces() ([]iface, error) {
	list, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]iface, 0, len(list))
	for _, in := range list {
		addrs, err := in.Addrs()
		if err != nil {
			return nil, err
		}
		out = append(out, iface{flags: in.Flags, addrs: addrs})
	}
	return out, nil
}

// resolveHosts returns the host fleet dev listens on and the one its URLs
// name: --advertise when given; else, listening on every interface (0.0.0.0
// or ::), this machine's first non-loopback address (ifaces, in order; IPv4
// first); else the listen address itself.
func resolveHosts(listen, advertise string, ifaces func() ([]iface, error)) (listenHost, advertiseHost string, err error) {
	listenHost = cmp.Or(listen, DefaultListen)
	if advertise != "" {
		return listenHost, advertise, nil
	}
	if ip := net.ParseIP(listenHost); ip == nil || !ip.IsUnspecified() {
		return listenHost, listenHost, nil
	}
	list, err := ifaces()
	if err != nil {
		return "", "", fmt.Errorf("fleet dev: --listen %s: list this machine's addresses: %w: pass --advertise", listenHost, err)
	}
	if a := firstNonLoopback(list); a != "" {
		return listenHost, a, nil
	}
	return "", "", fmt.Errorf("fleet dev: --listen %s: this machine has no non-loopback address a device could reach: pass --advertise", listenHost)
}

// firstNonLoopback is the first global unicast IPv4 address of an
// interface that is up and not loopback, else the first such IPv6 address;
// "" when there is none.
func firstNonLoopback(list []iface) string {
	var v6 string
	for _, in := range list {
		if in.flags&net.FlagUp == 0 || in.flags&net.FlagLoopback != 0 {
			continue
		}
		for _, a := range in.addrs {
			var ip net.IP
			switch a := a.(type) {
			case *net.IPNet:
				ip = a.IP
			case *net.IPAddr:
				ip = a.IP
			}
			if ip == nil || !ip.IsGlobalUnicast() {
				continue
			}
			if ip.To4() != nil {
				return ip.String()
			}
			if v6 == "" {
				v6 = ip.String()
			}
		}
	}
	return v6
}

// isLoopback reports whether host is a loopback address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// devGroups puts every device of the namespace in devGroup and
// ExampleGroup: fleet dev's own devices and those attached with `fleet
// enroll --dev` alike, so the examples (allowedGroups: [lab]), the
// reference harmony program (allowedGroups: [example-edge]) and the
// stand-in's role (OpenBaoRole) cover them.
type devGroups struct{ namespace string }

// Groups implements operator.GroupSource.
func (g devGroups) Groups(_ context.Context, namespace, _ string) ([]string, error) {
	if namespace == g.namespace {
		return []string{devGroup, ExampleGroup}, nil
	}
	return nil, nil
}

// Reattach re-enrolls a device whose Device resource exists at a
// development provider, which may have lost its machine user (its state
// file deleted, or a provider without one): it finds (or creates) the
// machine user enroll.UserName(device), points the Device's
// spec.identitySubject at it when that changed (the operator then registers
// the new identity), mints a new key into r.KeyFile and removes the user's
// old keys (enroll.Enroller.Reenroll). en must enroll at p into namespace
// through c. fleet dev re-enrolls its own devices so on every start, and
// `fleet enroll --dev --reenroll` an attached device.
func Reattach(ctx context.Context, en *enroll.Enroller, c client.Client, p enroll.Provider, namespace string, r enroll.Request) (enroll.Result, error) {
	dev := r.Device
	var obj fleetv1.Device
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: dev}, &obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return enroll.Result{}, fmt.Errorf("%w: %s/%s: enroll it first (without --reenroll)", enroll.ErrNotEnrolled, namespace, dev)
		}
		return enroll.Result{}, fmt.Errorf("fleet dev: device %s: %w", dev, err)
	}
	uid, err := p.CreateMachineUser(ctx, enroll.UserName(dev))
	if err != nil {
		return enroll.Result{}, fmt.Errorf("fleet dev: machine user of %s: %w", dev, err)
	}
	if obj.Spec.IdentitySubject != uid {
		patch := client.MergeFrom(obj.DeepCopy())
		obj.Spec.IdentitySubject = uid
		if err := c.Patch(ctx, &obj, patch); err != nil {
			return enroll.Result{}, fmt.Errorf("fleet dev: device %s: set the new identity subject: %w", dev, err)
		}
	}
	return en.Reenroll(ctx, r)
}

// DefaultDataDir is fleet dev's data folder unless --data-dir says
// otherwise: fleet-dev in the user's cache folder ($XDG_CACHE_HOME,
// ~/.cache), else .fleet-dev in the working directory.
func DefaultDataDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "fleet-dev")
	}
	return ".fleet-dev"
}
