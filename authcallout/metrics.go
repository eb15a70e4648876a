package authcallout

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names (docs/metrics.md lists them).
const (
	// MetricAuthorizations counts the answered authorization requests by
	// result and reason.
	MetricAuthorizations = "fleet_authcallout_authorizations_total"
	// MetricAuthorizationDuration is the time from a request's receipt to
	// its response sent, by result.
	MetricAuthorizationDuration = "fleet_authcallout_authorization_duration_seconds"
	// MetricTokenVerificationErrors counts failed id_token verifications by
	// reason.
	MetricTokenVerificationErrors = "fleet_authcallout_token_verification_errors_total"
	// MetricRevocations counts connections disconnected by live revocation.
	MetricRevocations = "fleet_authcallout_revocations_total"
	// MetricJWKSRefreshes counts fetches of the provider's key set by
	// result.
	MetricJWKSRefreshes = "fleet_authcallout_jwks_refreshes_total"
)

// The result label of MetricAuthorizations and MetricAuthorizationDuration.
const (
	resultAllowed = "allowed"
	resultRefused = "refused"
)

// The reason label of MetricAuthorizations: reasonOK for an allowed
// connect, one class of refusal otherwise. Never a device, subject or
// token.
const (
	reasonOK = "ok"
	// reasonBadRequest: the request did not decode (ErrBadRequest); the
	// answer is empty.
	reasonBadRequest      = "bad_request"
	reasonNoToken         = "no_token"
	reasonMalformedToken  = "malformed_token"
	reasonAlgorithm       = "algorithm_not_allowed"
	reasonUnknownKey      = "unknown_key"
	reasonTokenExpired    = "token_expired"
	reasonTokenInvalid    = "token_invalid"
	reasonKeysUnavailable = "keys_unavailable"
	reasonUnknownIdentity = "unknown_identity"
	reasonQuarantined     = "quarantined"
	// reasonIdentityUnavailable: fleet-identity could not be read.
	reasonIdentityUnavailable = "identity_unavailable"
	// reasonInternal: the callout failed to build its answer.
	reasonInternal = "internal"
)

// refusalReasons are the reasons of refused answers.
var refusalReasons = []string{reasonBadRequest, reasonNoToken, reasonMalformedToken, reasonAlgorithm, reasonUnknownKey,
	reasonTokenExpired, reasonTokenInvalid, reasonKeysUnavailable, reasonUnknownIdentity, reasonQuarantined,
	reasonIdentityUnavailable, reasonInternal}

// verificationReasons are the reason label values of
// MetricTokenVerificationErrors: the sentinel's class, or for a token
// whose key was found the check that failed (check); verifyOther is never
// expected.
var verificationReasons = []string{reasonNoToken, reasonMalformedToken, reasonAlgorithm, reasonUnknownKey, reasonKeysUnavailable,
	string(checkExpired), string(checkNotYetValid), string(checkIssuer), string(checkAudience), string(checkIssuedAt),
	string(checkRequiredClaim), string(checkClaims), string(checkSignature), verifyOther}

// verifyOther is the verification reason of an error of no known class.
const verifyOther = "other"

// durationBuckets span 0.5 ms (a cached key, no network) to 5 s (the
// default request timeout).
var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// Metrics are the callout's Prometheus metrics (fleet_authcallout_*): give
// the same Metrics to Options (or ReplicaOptions) and VerifierOptions, and
// register Collectors on the registry served. Labels are bounded enums:
// never a device, a subject, a token or a key. A nil *Metrics records
// nothing. Safe for concurrent use.
type Metrics struct {
	authorizations *prometheus.CounterVec
	durations      *prometheus.HistogramVec
	verifyErrors   *prometheus.CounterVec
	revocations    prometheus.Counter
	jwksRefreshes  *prometheus.CounterVec
}

// NewMetrics returns the callout's metrics at zero, every series of the
// label enums present.
func NewMetrics() *Metrics {
	m := &Metrics{
		authorizations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricAuthorizations,
			Help: "Authorization requests answered, by result (allowed, refused) and reason (ok when allowed; bad_request, no_token, malformed_token, algorithm_not_allowed, unknown_key, token_expired, token_invalid, keys_unavailable, unknown_identity, quarantined, identity_unavailable, internal)."},
			[]string{"result", "reason"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: MetricAuthorizationDuration,
			Help:    "Time from an authorization request's receipt to its response sent, by result (allowed, refused).",
			Buckets: durationBuckets},
			[]string{"result"}),
		verifyErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricTokenVerificationErrors,
			Help: "id_token verifications that failed, by reason (no_token, malformed_token, algorithm_not_allowed, unknown_key, keys_unavailable, expired, not_yet_valid, wrong_issuer, wrong_audience, issued_in_future, missing_claim, claim_invalid, signature_invalid, other)."},
			[]string{"reason"}),
		revocations: prometheus.NewCounter(prometheus.CounterOpts{Name: MetricRevocations,
			Help: "Connections disconnected by live revocation (their identity quarantined or removed)."}),
		jwksRefreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricJWKSRefreshes,
			Help: "Fetches of the OpenID Provider's key set (with discovery when needed), by result (ok, error)."},
			[]string{"result"}),
	}
	m.authorizations.WithLabelValues(resultAllowed, reasonOK)
	for _, r := range refusalReasons {
		m.authorizations.WithLabelValues(resultRefused, r)
	}
	m.durations.WithLabelValues(resultAllowed)
	m.durations.WithLabelValues(resultRefused)
	for _, r := range verificationReasons {
		m.verifyErrors.WithLabelValues(r)
	}
	m.jwksRefreshes.WithLabelValues("ok")
	m.jwksRefreshes.WithLabelValues("error")
	return m
}

// Collectors returns the collectors to register (none for nil).
func (m *Metrics) Collectors() []prometheus.Collector {
	if m == nil {
		return nil
	}
	return []prometheus.Collector{m.authorizations, m.durations, m.verifyErrors, m.revocations, m.jwksRefreshes}
}

// answered records an answer with reason (reasonOK: allowed) that took
// took.
func (m *Metrics) answered(reason string, took time.Duration) {
	if m == nil {
		return
	}
	result := resultRefused
	if reason == reasonOK {
		result = resultAllowed
	}
	m.authorizations.WithLabelValues(result, reason).Inc()
	m.durations.WithLabelValues(result).Observe(took.Seconds())
}

// verificationFailed records a failed verification by err's class.
func (m *Metrics) verificationFailed(err error) {
	if m != nil {
		m.verifyErrors.WithLabelValues(verificationReason(err)).Inc()
	}
}

// revoked records a connection disconnected by live revocation.
func (m *Metrics) revoked() {
	if m != nil {
		m.revocations.Inc()
	}
}

// refreshed records a key-set fetch that failed with err (nil: ok).
func (m *Metrics) refreshed(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.jwksRefreshes.WithLabelValues(result).Inc()
}

// lookupError is an Identities failure other than an unknown identity
// (fleet-identity unreadable); its text is the wrapped error's.
type lookupError struct{ err error }

func (e lookupError) Error() string { return e.err.Error() }
func (e lookupError) Unwrap() error { return e.err }

// tokenClass is the class of a Verify error: the label of its sentinel
// ("" when none).
func tokenClass(err error) string {
	for _, c := range []struct {
		sentinel error
		label    string
	}{
		{ErrNoToken, reasonNoToken}, {ErrMalformedToken, reasonMalformedToken}, {ErrAlgorithm, reasonAlgorithm},
		{ErrUnknownKey, reasonUnknownKey}, {ErrJWKS, reasonKeysUnavailable}, {ErrInvalidToken, reasonTokenInvalid},
	} {
		if errors.Is(err, c.sentinel) {
			return c.label
		}
	}
	return ""
}

// verificationReason is the MetricTokenVerificationErrors reason of a
// Verify error: the failed check of an invalid token, its sentinel's class
// otherwise.
func verificationReason(err error) string {
	var c check
	if errors.As(err, &c) {
		return string(c)
	}
	if l := tokenClass(err); l != "" && l != reasonTokenInvalid {
		return l
	}
	return verifyOther
}

// refusalReason is the MetricAuthorizations reason of an Authorize error.
func refusalReason(err error) string {
	var c check
	if errors.As(err, &c) && c == checkExpired {
		return reasonTokenExpired
	}
	if l := tokenClass(err); l != "" {
		return l
	}
	var le lookupError
	switch {
	case errors.Is(err, ErrQuarantined):
		return reasonQuarantined
	case errors.Is(err, ErrUnknownIdentity):
		return reasonUnknownIdentity
	case errors.As(err, &le):
		return reasonIdentityUnavailable
	case errors.Is(err, ErrBadRequest):
		return reasonBadRequest
	}
	return reasonInternal
}
