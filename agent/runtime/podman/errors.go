package podman

import (
	"errors"
	"net/http"
	"regexp"
	"strings"

	"github.com/containers/podman/v5/pkg/errorhandling"

	"github.com/nationtech/harmony-fleet/agent/runtime"
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
	red := redactText(msg, secrets)
	if red == msg {
		return err
	}
	return &redacted{msg: red, sentinel: sentinel}
}

// redactText is msg cut at a raw response body and without secrets (see
// redact).
func redactText(msg string, secrets []string) string {
	if i := strings.Index(msg, ", data "); i >= 0 {
		msg = msg[:i] + ", data <elided>"
	}
	for _, s := range secrets {
		if len(s) >= minSecretLen {
			msg = strings.ReplaceAll(msg, s, "<redacted>")
		}
	}
	return msg
}

// The wrapping go.podman.io/image puts around a pull's cause, removed from
// a PullError's detail: the PullError names the image and the registry
// itself. An ephemeral local address ("read tcp 10.0.0.2:53712->…") is
// removed too, so that the detail, and the report, stay the same across
// retries.
var (
	pullSourcePrefix   = regexp.MustCompile(`^.*initializing source \S+: `)
	pullPingPrefix     = regexp.MustCompile(`pinging container registry \S+: `)
	pullRequestPrefix  = regexp.MustCompile(`\b(?i:get|head|post|put|patch) "[^"]*": `)
	pullManifestPrefix = regexp.MustCompile(`reading manifest \S+ in \S+: `)
	pullLocalAddress   = regexp.MustCompile(`\S+->`)
)

// maxPullDetail bounds a PullError's detail, in bytes.
const maxPullDetail = 300

// pullDetail is the engine's cause of a failed pull on one line, without
// the wrapping (pullSourcePrefix …) and without secrets: "manifest
// unknown", "dial tcp 127.0.0.1:443: connect: connection refused".
func pullDetail(err error, secrets []string) string {
	msg := strings.Join(strings.Fields(err.Error()), " ")
	msg = pullSourcePrefix.ReplaceAllString(msg, "")
	msg = pullPingPrefix.ReplaceAllString(msg, "")
	msg = pullRequestPrefix.ReplaceAllString(msg, "")
	msg = pullManifestPrefix.ReplaceAllString(msg, "")
	msg = pullLocalAddress.ReplaceAllString(msg, "")
	msg = strings.ReplaceAll(msg, "dial tcp: lookup ", "lookup ")
	if a, b, ok := strings.Cut(msg, ": "); ok && a == b { // "manifest unknown: manifest unknown"
		msg = a
	}
	msg = redactText(msg, secrets)
	if len(msg) > maxPullDetail {
		msg = strings.ToValidUTF8(msg[:maxPullDetail], "") + "…"
	}
	return msg
}

// serverErrorMarkers are the registryUnavailableMarkers of a registry that
// answered, with a server error or a 429.
var serverErrorMarkers = []string{
	"received unexpected http status: 5", "status code: 5", "statuscode: 5", "service unavailable", "bad gateway",
	"gateway timeout", "internal server error", "too many requests",
}

// tlsMarkers are the phrases of a registry certificate that does not
// verify.
var tlsMarkers = []string{"x509:", "certificate signed by unknown authority", "tls: failed to verify certificate"}

// pullError is the *runtime.PullError of err from images.Pull, which is
// neither a cancelled pull nor an engine that cannot be reached: classified
// by the markers (isAuthFailure, isImageNotFound, isRegistryUnavailable),
// with the engine's detail without secrets.
func pullError(ref string, auth *runtime.RegistryAuth, err error, secrets []string) *runtime.PullError {
	detail := pullDetail(err, secrets)
	var sentinel error
	cause := runtime.PullCauseOther
	switch {
	case isAuthFailure(err):
		sentinel, cause = runtime.ErrAuth, runtime.PullCauseAuth
	case isImageNotFound(err):
		sentinel, cause = runtime.ErrImageNotFound, runtime.PullCauseNotFound
	case isRegistryUnavailable(err):
		sentinel, cause = runtime.ErrRegistryUnavailable, runtime.PullCauseUnreachable
		switch {
		case containsAny(err, []string{"no such host"}):
			cause = runtime.PullCauseNoSuchHost
		case containsAny(err, []string{"connection refused"}):
			cause = runtime.PullCauseRefused
		case containsAny(err, serverErrorMarkers):
			cause = runtime.PullCauseServerError
		}
	case containsAny(err, tlsMarkers):
		cause = runtime.PullCauseTLS
	}
	return runtime.NewPullError(ref, auth, sentinel, cause, detail)
}
