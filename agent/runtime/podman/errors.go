package podman

import (
	"errors"
	"net/http"
	"strings"

	"github.com/containers/podman/v5/pkg/errorhandling"
)

// ErrOptions reports invalid Options.
var ErrOptions = errors.New("podman: invalid options")

// authMarkers are the phrases a registry authentication failure leaves in
// the error text. Podman answers a refused pull with HTTP 200 and streams
// the error, e.g. "reading manifest …: unauthorized: authentication
// required", so the text is all there is. "requested access to the resource
// is denied" is what Docker Hub-like registries answer for a private or
// missing repository without access.
var authMarkers = []string{
	"unauthorized",
	"authentication required",
	"invalid username/password",
	"requested access to the resource is denied",
}

// notFoundMarkers are the phrases of a registry that has no such image
// (distribution's MANIFEST_UNKNOWN and NAME_UNKNOWN error codes).
var notFoundMarkers = []string{
	"manifest unknown",
	"name unknown",
	"repository name not known",
}

// isAuthFailure reports whether err from images.Pull means the registry
// refused the credentials (none, or wrong ones), as opposed to a missing
// image, a network failure or a server error.
func isAuthFailure(err error) bool {
	if err == nil {
		return false
	}
	var model *errorhandling.ErrorModel
	if errors.As(err, &model) && model.ResponseCode == http.StatusUnauthorized {
		return true
	}
	return containsAny(err, authMarkers)
}

// isImageNotFound reports whether err from images.Pull means the registry
// has no such repository, tag or digest.
func isImageNotFound(err error) bool {
	if err == nil {
		return false
	}
	return containsAny(err, notFoundMarkers)
}

// registryUnavailableMarkers are the phrases of a pull that failed because
// the registry could not be reached or failed to answer, as Podman streams
// them (go.podman.io/image wraps Go's transport errors as text, e.g.
// "pinging container registry 127.0.0.1:1: Get …: dial tcp 127.0.0.1:1:
// connect: connection refused"). Neither a TLS certificate that does not
// verify nor a 4xx is here: those are definite answers.
var registryUnavailableMarkers = []string{
	"connection refused",
	"connection reset by peer",
	"no such host",       // DNS: the name does not resolve (now)
	"server misbehaving", // DNS: the resolver failed
	"temporary failure in name resolution",
	"no route to host",
	"network is unreachable",
	"i/o timeout",
	"tls handshake timeout",
	"client.timeout exceeded",
	"timeout awaiting response headers",
	"unexpected eof",
	"received unexpected http status: 5", // 500, 502, 503, 504 …
	"status code: 5",
	"statuscode: 5",
	"service unavailable",
	"bad gateway",
	"gateway timeout",
	"internal server error",
	"too many requests", // 429: the registry asks us to come back later
}

// isRegistryUnavailable reports whether err from images.Pull means the
// registry could not be reached or answered with a server error: a
// condition that may pass, not a verdict on the image or the credential.
// Call it after isAuthFailure and isImageNotFound, which win.
func isRegistryUnavailable(err error) bool {
	if err == nil {
		return false
	}
	return containsAny(err, registryUnavailableMarkers)
}

func containsAny(err error, markers []string) bool {
	msg := strings.ToLower(err.Error())
	for _, m := range markers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// Podman's causes (ErrorModel.Because) for the errors the runtime types.
const (
	causeNoSuchContainer = "no such container"
	causeNameInUse       = "that name is already in use"
	causeImageNotKnown   = "image not known"
	causeNoSuchImage     = "no such image"
)

// hasCause reports whether err is a Podman error reply with the given cause
// (or, for replies without one, whose message ends with it).
func hasCause(err error, cause string) bool {
	var model *errorhandling.ErrorModel
	if !errors.As(err, &model) {
		return false
	}
	return model.Because == cause || strings.HasSuffix(model.Message, cause)
}

// isNoSuchContainer reports a reply about a container that does not exist.
func isNoSuchContainer(err error) bool {
	var model *errorhandling.ErrorModel
	if errors.As(err, &model) && model.ResponseCode == http.StatusNotFound && model.Because == causeNoSuchContainer {
		return true
	}
	return hasCause(err, causeNoSuchContainer)
}

// minSecretLen is the shortest secret redact replaces: shorter values (a
// "1", a "no") would garble every message without protecting anything.
const minSecretLen = 4

// redacted is an error whose text had secrets removed. It unwraps to the
// runtime sentinel it carries (if any), never to the original error, whose
// text still holds the secret.
type redacted struct {
	msg      string
	sentinel error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.sentinel }

// redact returns err unchanged when its text holds none of secrets and no
// raw response body, and otherwise an error with the same text minus those,
// still matching sentinel with errors.Is.
//
// The bindings put the raw body into decoding errors ("unmarshalling into
// …, data %q"); an inspect body holds every environment value, so the text
// is cut there.
func redact(err error, sentinel error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	changed := false
	if i := strings.Index(msg, ", data "); i >= 0 {
		msg = msg[:i] + ", data <elided>"
		changed = true
	}
	for _, s := range secrets {
		if len(s) >= minSecretLen && strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, "<redacted>")
			changed = true
		}
	}
	if !changed {
		return err
	}
	return &redacted{msg: msg, sentinel: sentinel}
}
