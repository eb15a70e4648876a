package podman

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containers/podman/v5/pkg/errorhandling"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// The messages below are verbatim what Podman 4.3.1 answered in the probes
// that fixed this mapping (distribution registry 2.8 behind it).
func TestPullErrorsAreClassified(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		auth, absent bool
		unavailable  bool
	}{
		{"an anonymous pull refused by the registry is an auth failure",
			errors.New("initializing source docker://127.0.0.1:5000/smoke@sha256:ab55: reading manifest sha256:ab55 in 127.0.0.1:5000/smoke: unauthorized: authentication required"), true, false, false},
		{"a refusal wrapped by the caller still is",
			fmt.Errorf("pull: %w", errors.New("reading manifest: unauthorized: authentication required")), true, false, false},
		{"wrong credentials are an auth failure",
			errors.New("unable to retrieve auth token: invalid username/password: unauthorized: authentication required"), true, false, false},
		{"an HTTP 401 error model is an auth failure",
			&errorhandling.ErrorModel{Message: "login failed", ResponseCode: 401}, true, false, false},
		{"a denied repository is an auth failure",
			errors.New("reading manifest latest in docker.io/acme/x: requested access to the resource is denied"), true, false, false},
		{"a missing repository is an absent image",
			errors.New("initializing source docker://127.0.0.1:5000/nothere/x:latest: reading manifest latest in 127.0.0.1:5000/nothere/x: manifest unknown: manifest unknown"), false, true, false},
		{"a missing digest is an absent image",
			errors.New("reading manifest sha256:0000 in 127.0.0.1:5000/podmantest/smoke: manifest unknown: manifest unknown"), false, true, false},
		{"an unknown repository name is an absent image",
			errors.New("reading manifest v1 in reg/x: name unknown: repository name not known to registry"), false, true, false},
		{"a refused connection is an unavailable registry",
			errors.New("pinging container registry 127.0.0.1:5999: dial tcp 127.0.0.1:5999: connect: connection refused"), false, false, true},
		{"a name that does not resolve is an unavailable registry",
			errors.New(`pinging container registry reg.invalid: Get "https://reg.invalid/v2/": dial tcp: lookup reg.invalid on 10.0.0.1:53: no such host`), false, false, true},
		{"a timeout is an unavailable registry",
			errors.New(`pinging container registry 10.1.2.3:5000: Get "https://10.1.2.3:5000/v2/": dial tcp 10.1.2.3:5000: i/o timeout`), false, false, true},
		{"a TLS handshake timeout is an unavailable registry",
			errors.New(`pinging container registry r:5000: Get "https://r:5000/v2/": net/http: TLS handshake timeout`), false, false, true},
		{"a registry answering 503 is an unavailable registry",
			errors.New("reading manifest v1 in r:5000/x: received unexpected HTTP status: 503 Service Unavailable"), false, false, true},
		{"a ping answered 502 is an unavailable registry",
			errors.New("pinging container registry r:5000: StatusCode: 502, <html>bad gateway</html>"), false, false, true},
		{"an untrusted certificate is neither",
			errors.New("x509: certificate signed by unknown authority"), false, false, false},
		{"an invalid reference is neither", errors.New("invalid reference format"), false, false, false},
		{"no error is neither", nil, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isAuthFailure(tt.err); got != tt.auth {
				t.Errorf("isAuthFailure = %v, want %v", got, tt.auth)
			}
			if got := isImageNotFound(tt.err); got != tt.absent {
				t.Errorf("isImageNotFound = %v, want %v", got, tt.absent)
			}
			if got := isRegistryUnavailable(tt.err) && !tt.auth && !tt.absent; got != tt.unavailable {
				t.Errorf("isRegistryUnavailable (after auth and absence) = %v, want %v", got, tt.unavailable)
			}
		})
	}
}

func TestContainerErrorsAreClassified(t *testing.T) {
	noSuch := &errorhandling.ErrorModel{Because: "no such container",
		Message: `no container with name or ID "x" found: no such container`, ResponseCode: 404}
	inUse := &errorhandling.ErrorModel{Because: "that name is already in use", ResponseCode: 500,
		Message: `creating container storage: the container name "a" is already in use by c441. You have to remove that container to be able to reuse that name: that name is already in use`}
	noImage := &errorhandling.ErrorModel{Because: "image not known", Message: "localhost/nope:latest: image not known", ResponseCode: 500}
	improper := &errorhandling.ErrorModel{Because: "container state improper", ResponseCode: 500,
		Message: "cannot remove container c441 as it is running - running or paused containers cannot be removed without force: container state improper"}
	tests := []struct {
		name  string
		err   error
		cause string
		want  bool
	}{
		{"a missing container has its cause", noSuch, causeNoSuchContainer, true},
		{"a taken name has its cause", inUse, causeNameInUse, true},
		{"an absent image has its cause", noImage, causeImageNotKnown, true},
		{"a running container is not a missing one", improper, causeNoSuchContainer, false},
		{"a plain error has no cause", errors.New("that name is already in use"), causeNameInUse, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hasCause(tt.err, tt.cause); got != tt.want {
				t.Errorf("hasCause(%q) = %v, want %v", tt.cause, got, tt.want)
			}
		})
	}
	if !isNoSuchContainer(noSuch) || isNoSuchContainer(improper) {
		t.Error("isNoSuchContainer does not tell a missing container from a running one")
	}
}

func TestRedactRemovesSecretsAndKeepsTheSentinel(t *testing.T) {
	const secret = "hunter2-secret"
	tests := []struct {
		name     string
		err      error
		sentinel error
		secrets  []string
		same     bool
	}{
		{"an error without secrets is returned unchanged", errors.New("pull x: connection refused"), nil, []string{secret}, true},
		{"a secret in the text is removed", fmt.Errorf("pull x: %w: bad "+secret, runtime.ErrAuth), runtime.ErrAuth, []string{secret}, false},
		{"a raw response body is elided", errors.New(`unmarshalling into &define.X{}, data "{\"Env\":[\"X=` + secret + `\"]}": bad`), nil, nil, false},
		{"short values are left alone", errors.New("exit 1 of no"), nil, []string{"no", "1"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := redact(tt.err, tt.sentinel, tt.secrets...)
			if (got == tt.err) != tt.same {
				t.Errorf("redact returned %v; same error = %v, want %v", got, got == tt.err, tt.same)
			}
			if strings.Contains(got.Error(), secret) {
				t.Error("the redacted text still holds the secret")
			}
			if tt.sentinel != nil && !errors.Is(got, tt.sentinel) {
				t.Errorf("redacted error %v does not match its sentinel", got)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		uri  string
		ok   bool
	}{
		{"a unix socket is valid", "unix:///run/podman/podman.sock", true},
		{"an empty URI is not", "", false},
		{"a TCP URI is not", "tcp://127.0.0.1:8080", false},
		{"a unix URI without a path is not", "unix://", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Options{URI: tt.uri}.Validate()
			if (err == nil) != tt.ok {
				t.Fatalf("Validate(%q) = %v, want ok=%v", tt.uri, err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrOptions) {
				t.Errorf("Validate error %v is not ErrOptions", err)
			}
		})
	}
}

// The texts are what Podman 4.3.1 answered to the probes of issue #32.
func TestAPullErrorIsOneLineWithTheEnginesCauseAlone(t *testing.T) {
	const secret = "marker-password-7f3a"
	withSecret := &runtime.RegistryAuth{Username: "puller", Password: secret}
	tests := []struct {
		name string
		ref  string
		auth *runtime.RegistryAuth
		err  string
		want string
		is   error
	}{
		{"a localhost image that was never built",
			"localhost/fleet-examples/analysis-apii:v1", nil,
			`initializing source docker://localhost/fleet-examples/analysis-apii:v1: pinging container registry localhost: Get "https://localhost/v2/": dial tcp 127.0.0.1:443: connect: connection refused`,
			"image localhost/fleet-examples/analysis-apii:v1 could not be pulled from localhost (anonymously): " +
				"the registry refused the connection (dial tcp 127.0.0.1:443: connect: connection refused); " +
				"check the image name: a localhost/ image is one built or loaded on the device, and this device does not have it",
			runtime.ErrRegistryUnavailable},
		{"a host name that does not resolve",
			"nonexistent.invalid/app:v1", nil,
			`initializing source docker://nonexistent.invalid/app:v1: pinging container registry nonexistent.invalid: Get "https://nonexistent.invalid/v2/": dial tcp: lookup nonexistent.invalid on 10.255.255.53:53: no such host`,
			"image nonexistent.invalid/app:v1 could not be pulled from nonexistent.invalid (anonymously): " +
				"the registry's host name does not resolve (lookup nonexistent.invalid on 10.255.255.53:53: no such host); " +
				"check the registry host in the image name",
			runtime.ErrRegistryUnavailable},
		{"a tag the registry does not have, with a pull secret",
			"127.0.0.1:5000/fleet-examples/analysis-apii:v1", withSecret,
			"initializing source docker://127.0.0.1:5000/fleet-examples/analysis-apii:v1: reading manifest v1 in 127.0.0.1:5000/fleet-examples/analysis-apii: manifest unknown: manifest unknown",
			"image 127.0.0.1:5000/fleet-examples/analysis-apii:v1 could not be pulled from 127.0.0.1:5000 (with the pull secret for 127.0.0.1:5000): " +
				"the image does not exist in the registry (manifest unknown); check the image name and tag",
			runtime.ErrImageNotFound},
		{"a refused credential that echoes the password",
			"127.0.0.1:5000/private/api:v1", withSecret,
			"initializing source docker://127.0.0.1:5000/private/api:v1: unable to retrieve auth token: invalid username/password (" + secret + "): unauthorized: authentication required",
			"image 127.0.0.1:5000/private/api:v1 could not be pulled from 127.0.0.1:5000 (with the pull secret for 127.0.0.1:5000): " +
				"the registry refused the credentials (unable to retrieve auth token: invalid username/password (<redacted>): unauthorized: authentication required); " +
				"check the pull secret's username and password",
			runtime.ErrAuth},
		{"a reset connection names no ephemeral port, so retries read the same",
			"hub.example/app:v1", nil,
			`initializing source docker://hub.example/app:v1: reading manifest v1 in hub.example/app: Get "https://hub.example/v2/app/manifests/v1": read tcp 10.0.0.2:53712->10.0.0.1:443: read: connection reset by peer`,
			"image hub.example/app:v1 could not be pulled from hub.example (anonymously): " +
				"the registry could not be reached (read tcp 10.0.0.1:443: read: connection reset by peer)",
			runtime.ErrRegistryUnavailable},
		{"a server error",
			"hub.example/app:v1", nil,
			"initializing source docker://hub.example/app:v1: reading manifest v1 in hub.example/app: received unexpected HTTP status: 503 Service Unavailable",
			"image hub.example/app:v1 could not be pulled from hub.example (anonymously): " +
				"the registry answered with a server error (received unexpected HTTP status: 503 Service Unavailable)",
			runtime.ErrRegistryUnavailable},
		{"a certificate that does not verify",
			"hub.example/app:v1", nil,
			"initializing source docker://hub.example/app:v1: pinging container registry hub.example: Get \"https://hub.example/v2/\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
			"image hub.example/app:v1 could not be pulled from hub.example (anonymously): " +
				"the registry's TLS certificate is not trusted (tls: failed to verify certificate: x509: certificate signed by unknown authority); " +
				"the device must trust the registry's certificate authority",
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var secrets []string
			if tt.auth != nil {
				secrets = append(secrets, tt.auth.Password)
			}
			err := pullError(tt.ref, tt.auth, errors.New(tt.err), secrets)
			if got := err.Error(); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("%v is not %v", err, tt.is)
			}
			if tt.is == nil && errors.Unwrap(err) != nil {
				t.Errorf("%v unwraps to %v, want nothing", err, errors.Unwrap(err))
			}
		})
	}
}
