package authcallout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Subject is where nats-server sends authorization requests.
const Subject = "$SYS.REQ.USER.AUTH"

// DefaultQueueGroup is the queue group replicas share, so each request is
// answered once.
const DefaultQueueGroup = "fleet-authcallout"

// DefaultExpirySpread is Options.ExpirySpread's default: a user JWT
// expires up to a tenth of its id_token's remaining lifetime early (at
// most 1 minute at the 10-minute production lifetime), which costs an
// idle device about 5 % more reconnects and spreads a wave of
// reconnects by up to that much more every lifetime (ADR 0036).
const DefaultExpirySpread = 0.1

// MaxExpirySpread bounds Options.ExpirySpread: a user JWT lives at least
// half its id_token's remaining lifetime.
const MaxExpirySpread = 0.5

// xkeyHeader carries the server's public xkey on an encrypted request.
const xkeyHeader = "Nats-Server-Xkey"

// Options configure a Service.
type Options struct {
	// Conn is a connection as one of auth_callout.auth_users (in the callout
	// account). Required by Run (Respond and Authorize do not use it). The
	// Service does not close it.
	Conn *nats.Conn
	// Issuer is the account key pair (seed starting SA) whose public key is
	// auth_callout.issuer; it signs user JWTs and responses. Required.
	Issuer nkeys.KeyPair
	// XKey is the curve key pair (seed starting SX) whose public key is
	// auth_callout.xkey. Optional: without it requests must be plain, with
	// it they must be encrypted.
	XKey nkeys.KeyPair
	// Account is the control-plane account (the user JWT's aud in config
	// mode) the operator role is placed in: the one that holds the streams,
	// the KV buckets and the JetStream API. Default AccountFleet.
	Account string
	// DeviceAccount is the account devices are placed in: JetStream
	// disabled, reaching the control plane only through the imports of
	// ServerConfig. Default AccountDevices. It must differ from Account: a
	// device in the control-plane account could aim JetStream's answers
	// (publish acks, direct-get replies, API errors) at any of its
	// subjects through a reply subject it chooses.
	DeviceAccount string
	// Verifier checks id_tokens. Required.
	Verifier *Verifier
	// Identities maps token subjects to devices. Required.
	Identities Identities
	// Watch, with System, enables live revocation: a connection allowed to
	// subscribe $KV.fleet-identity.> (in the users' account). When an
	// identity becomes quarantined or is removed, the connections this
	// replica authorised for it are disconnected. Optional.
	Watch *nats.Conn
	// System is a connection in the system account allowed to request
	// $SYS.REQ.SERVER.*.KICK. Required with Watch.
	System *nats.Conn
	// QueueGroup is the subscription's queue group. Default
	// DefaultQueueGroup.
	QueueGroup string
	// Workers is how many requests are processed at once. Default
	// 4×GOMAXPROCS.
	Workers int
	// Timeout bounds the processing of one request (key fetch, KV read).
	// Default 5s; keep it below the server's authorization timeout.
	Timeout time.Duration
	// ExpirySpread is the largest fraction of an id_token's remaining
	// lifetime by which the user JWT issued for it expires earlier, drawn
	// at random for each authorisation, so that devices which connected
	// together (a cluster restart, a site back online) do not all expire,
	// and reconnect, together again every lifetime. Zero means
	// DefaultExpirySpread; a negative value turns the spread off (the user
	// JWT expires with the id_token). At most MaxExpirySpread. A user JWT
	// never outlives its id_token either way.
	ExpirySpread float64
	// Logger receives one record per decision (subject, device, reason;
	// never a token). Default: discard.
	Logger *slog.Logger
	// Metrics records every answer (result, reason, duration) and every
	// live revocation. Optional: nil records nothing. The Verifier records
	// its own failures and key fetches (VerifierOptions.Metrics).
	Metrics *Metrics
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.Issuer == nil {
		errs = append(errs, errors.New("authcallout: Issuer is nil: give the issuer account key pair"))
	} else if pub, err := o.Issuer.PublicKey(); err != nil || !nkeys.IsValidPublicAccountKey(pub) {
		errs = append(errs, errors.New("authcallout: Issuer is not an account key pair (seed must start with SA)"))
	}
	if o.XKey != nil {
		if pub, err := o.XKey.PublicKey(); err != nil || !nkeys.IsValidPublicCurveKey(pub) {
			errs = append(errs, errors.New("authcallout: XKey is not a curve key pair (seed must start with SX)"))
		}
	}
	if o.Account != "" && o.Account == o.DeviceAccount {
		errs = append(errs, fmt.Errorf("authcallout: Account and DeviceAccount are both %q: devices must be in an account of their own (default %s, control plane %s)", o.Account, AccountDevices, AccountFleet))
	}
	if o.Verifier == nil {
		errs = append(errs, errors.New("authcallout: Verifier is nil"))
	}
	if o.Identities == nil {
		errs = append(errs, errors.New("authcallout: Identities is nil"))
	}
	if (o.Watch == nil) != (o.System == nil) {
		errs = append(errs, errors.New("authcallout: Watch and System go together: both enable live revocation"))
	}
	if o.Workers < 0 || o.Timeout < 0 {
		errs = append(errs, errors.New("authcallout: Workers and Timeout must not be negative"))
	}
	if o.ExpirySpread > MaxExpirySpread {
		errs = append(errs, fmt.Errorf("authcallout: ExpirySpread %g: use at most %g (a user JWT lives at least half its id_token's remaining lifetime), or a negative value for none", o.ExpirySpread, MaxExpirySpread))
	}
	return errors.Join(errs...)
}

// Service answers authorization requests.
type Service struct {
	o         Options
	log       *slog.Logger
	issuer    string // public account key
	sign      *signer
	box       *boxer // nil without XKey
	ready     chan struct{}
	readyOnce sync.Once
	live      live
	mirror    mirror
	// watchSub is the live-revocation subscription while Run serves with
	// Watch (nil otherwise): the mirror is used only with it.
	watchSub atomic.Pointer[nats.Subscription]
}

// New creates a Service; Run serves it.
func New(o Options) (*Service, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.QueueGroup == "" {
		o.QueueGroup = DefaultQueueGroup
	}
	if o.Account == "" {
		o.Account = AccountFleet
	}
	if o.DeviceAccount == "" {
		o.DeviceAccount = AccountDevices
	}
	if o.Account == o.DeviceAccount {
		return nil, fmt.Errorf("authcallout: Account and DeviceAccount are both %q: devices must be in an account of their own", o.Account)
	}
	if o.Workers == 0 {
		o.Workers = 4 * runtime.GOMAXPROCS(0)
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	switch {
	case o.ExpirySpread == 0:
		o.ExpirySpread = DefaultExpirySpread
	case o.ExpirySpread < 0:
		o.ExpirySpread = 0
	}
	s := &Service{o: o, log: o.Logger, ready: make(chan struct{})}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.issuer, _ = o.Issuer.PublicKey()
	var err error
	if s.sign, err = newSigner(o.Issuer); err != nil {
		return nil, err
	}
	if o.XKey != nil {
		if s.box, err = newBoxer(o.XKey); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run subscribes to Subject in the queue group and answers requests until
// ctx ends; it then unsubscribes, waits for the requests in progress and
// returns nil.
func (s *Service) Run(ctx context.Context) error {
	if s.o.Conn == nil {
		return errors.New("authcallout: Options.Conn is nil: connect as an auth_callout auth_users member")
	}
	// The subscription callback hands each request to a worker and blocks
	// while all are busy: requests then wait in the subscription's pending
	// buffer (limits raised below) instead of being dropped.
	ch := make(chan request)
	sub, err := s.o.Conn.QueueSubscribe(Subject, s.o.QueueGroup, func(m *nats.Msg) {
		select {
		case ch <- request{msg: m, received: time.Now()}:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return fmt.Errorf("authcallout: subscribe %s: %w", Subject, err)
	}
	if err := sub.SetPendingLimits(1<<20, 1<<30); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("authcallout: subscribe %s: %w", Subject, err)
	}
	if err := s.o.Conn.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("authcallout: subscribe %s: %w", Subject, err)
	}
	if s.o.Watch != nil {
		wsub, err := s.watchIdentities(ctx)
		if err != nil {
			_ = sub.Unsubscribe()
			return err
		}
		s.watchSub.Store(wsub)
		defer func() { s.watchSub.Store(nil); _ = wsub.Unsubscribe() }()
	}
	s.readyOnce.Do(func() { close(s.ready) })
	s.log.Info("auth callout serving", "subject", Subject, "queue", s.o.QueueGroup, "account", s.o.Account, "issuer", s.issuer, "encrypted", s.o.XKey != nil, "liveRevocation", s.o.Watch != nil)
	var wg sync.WaitGroup
	for range s.o.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case r := <-ch:
					s.serve(ctx, r)
				}
			}
		})
	}
	<-ctx.Done()
	err = sub.Unsubscribe()
	wg.Wait()
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return fmt.Errorf("authcallout: unsubscribe: %w", err)
	}
	return nil
}

// Ready is closed once Run's subscription is registered with the server.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// request is an authorization request and when the subscription got it.
type request struct {
	msg      *nats.Msg
	received time.Time
}

// serve answers one request and records the answer, timed from its
// receipt to its response sent.
func (s *Service) serve(ctx context.Context, r request) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	m := r.msg
	resp, why := s.respond(ctx, m.Data, m.Header.Get(xkeyHeader))
	if m.Reply != "" {
		if err := m.Respond(resp); err != nil {
			s.log.Warn("auth callout response not sent", "err", err)
		}
	}
	s.o.Metrics.answered(why, time.Since(r.received))
}

// Respond computes the answer to one authorization request: data is the
// message payload (the request JWT, sealed to our xkey when serverXKey is
// set). The answer is a response JWT (sealed to serverXKey when set) holding
// either a user JWT or the refusal reason; an undecodable request gets an
// empty answer, which the server treats as a refusal. The answer is
// recorded in Options.Metrics.
func (s *Service) Respond(ctx context.Context, data []byte, serverXKey string) []byte {
	start := time.Now()
	resp, why := s.respond(ctx, data, serverXKey)
	s.o.Metrics.answered(why, time.Since(start))
	return resp
}

// respond is Respond without the metrics; it also returns the answer's
// reason label (reasonOK when allowed).
func (s *Service) respond(ctx context.Context, data []byte, serverXKey string) ([]byte, string) {
	req, err := s.decodeRequest(data, serverXKey)
	if err != nil {
		s.log.Warn("auth callout request refused", "reason", err.Error())
		return nil, reasonBadRequest
	}
	rc := jwt.NewAuthorizationResponseClaims(req.UserNkey)
	rc.Audience = req.Server.ID
	now := time.Now()
	user, who, err := s.authorize(ctx, req, func(who Who) {
		s.live.add(who.Subject, liveConn{server: req.Server.ID, cid: req.ClientInformation.ID, until: who.Until}, now)
	})
	why := reasonOK
	if err != nil {
		why = refusalReason(err)
		rc.Error = refusal(err)
		s.log.Info("connect refused", "subject", who.Subject, "device", who.Device, "host", req.ClientInformation.Host, "reason", err.Error())
	} else {
		rc.Jwt = user
		s.log.Debug("connect authorised", "subject", who.Subject, "device", who.Device, "role", who.Role, "host", req.ClientInformation.Host)
	}
	out, err := rc.EncodeWithSigner(s.sign.key, s.sign.sign)
	if err != nil {
		s.log.Error("auth callout response not encoded", "err", err)
		return nil, reasonInternal
	}
	if serverXKey == "" {
		return []byte(out), why
	}
	sealed, err := s.box.seal([]byte(out), serverXKey)
	if err != nil {
		s.log.Error("auth callout response not sealed", "err", err)
		return nil, reasonInternal
	}
	return sealed, why
}

// refusal is the reason the server logs for a refused connect: the sentinel
// text only (claims are not echoed).
func refusal(err error) string {
	for _, e := range []error{ErrNoToken, ErrMalformedToken, ErrAlgorithm, ErrUnknownKey, ErrInvalidToken, ErrUnknownIdentity, ErrQuarantined, ErrJWKS} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "authcallout: not authorized"
}

func (s *Service) decodeRequest(data []byte, serverXKey string) (*jwt.AuthorizationRequestClaims, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadRequest)
	}
	switch {
	case s.o.XKey != nil && serverXKey == "":
		return nil, fmt.Errorf("%w: plain request but the callout requires encryption (xkey)", ErrBadRequest)
	case s.o.XKey == nil && serverXKey != "":
		return nil, fmt.Errorf("%w: encrypted request but the callout has no xkey", ErrBadRequest)
	case s.o.XKey != nil:
		opened, err := s.box.open(data, serverXKey)
		if err != nil {
			return nil, err
		}
		data = opened
	}
	req, err := jwt.DecodeAuthorizationRequestClaims(string(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	vr := jwt.CreateValidationResults()
	req.Validate(vr)
	if vr.IsBlocking(true) {
		return nil, fmt.Errorf("%w: %s", ErrBadRequest, validationIssues(vr))
	}
	if !nkeys.IsValidPublicServerKey(req.Issuer) {
		return nil, fmt.Errorf("%w: not signed by a server key", ErrBadRequest)
	}
	if !nkeys.IsValidPublicUserKey(req.UserNkey) || req.Server.ID == "" {
		return nil, fmt.Errorf("%w: missing user nkey or server id", ErrBadRequest)
	}
	return req, nil
}

// Who describes the identity behind a request, for logs.
type Who struct {
	// Subject is the token's sub ("" when the token did not verify).
	Subject string
	// Device is the device id found in fleet-identity, if any.
	Device string
	// Role is the control-plane role that authorised it, if any.
	Role string
	// Until is when the issued user JWT expires.
	Until time.Time
}

// Authorize decides one request: it verifies the presented token, finds
// the identity and returns the signed user JWT for req.UserNkey.
func (s *Service) Authorize(ctx context.Context, req *jwt.AuthorizationRequestClaims) (string, Who, error) {
	return s.authorize(ctx, req, nil)
}

// authorize is Authorize; register, when set, is called with an
// authorised device before the identity read is released to a concurrent
// fleet-identity change (see mirror), so that the change finds the
// connection to disconnect.
func (s *Service) authorize(ctx context.Context, req *jwt.AuthorizationRequestClaims, register func(Who)) (string, Who, error) {
	var who Who
	token := req.ConnectOptions.Token
	claims, err := s.o.Verifier.Verify(ctx, token)
	if err != nil {
		return "", who, err
	}
	who.Subject = claims.Subject
	// Skew lets a just-expired token verify, but the user JWT never outlives
	// the id_token: an expired token gets a refusal, not a dead JWT.
	if !claims.Expiry.After(time.Now()) {
		return "", who, fmt.Errorf("%w: %w", ErrInvalidToken, checkExpired)
	}
	var perms jwt.Permissions
	name := claims.Subject
	account := s.o.DeviceAccount
	switch {
	case slices.Contains(claims.Roles, RoleOperator):
		who.Role = RoleOperator
		perms = OperatorPermissions()
		account = s.o.Account
	default:
		s.mirror.gate.RLock()
		defer s.mirror.gate.RUnlock()
		id, err := s.lookupIdentity(ctx, claims.Subject)
		if err != nil {
			if !errors.Is(err, ErrUnknownIdentity) {
				err = lookupError{err}
			}
			return "", who, err
		}
		who.Device = id.Device
		if id.Quarantined {
			return "", who, fmt.Errorf("%w: %s", ErrQuarantined, id.Device)
		}
		if perms, err = DevicePermissions(id.Device); err != nil {
			return "", who, fmt.Errorf("%w: %w", ErrUnknownIdentity, err)
		}
		name = id.Device
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = name
	uc.Audience = account
	who.Until = spreadExpiry(claims.Expiry, time.Now(), s.o.ExpirySpread, rand.Float64())
	uc.Expires = who.Until.Unix()
	uc.Permissions = perms
	out, err := uc.EncodeWithSigner(s.sign.key, s.sign.sign)
	if err != nil {
		return "", who, fmt.Errorf("authcallout: encode user JWT: %w", err)
	}
	if register != nil && who.Device != "" {
		register(who)
	}
	return out, who, nil
}

// validationIssues describes what made a request's validation blocking: its
// errors, and its time checks (nats-io/jwt's Errors leaves those out). A
// request past its expiry is one the server has already given up on: it
// waited longer than the server's auth timeout before the callout read it.
func validationIssues(vr *jwt.ValidationResults) string {
	var out []string
	for _, i := range vr.Issues {
		switch {
		case i.Blocking:
			out = append(out, i.Description)
		case i.TimeCheck:
			out = append(out, "time check failed: "+i.Description+
				" (a request past its expiry waited longer than the server's auth timeout: the callout is overloaded, or the clocks differ)")
		}
	}
	return strings.Join(out, "; ")
}

// spreadExpiry is when a user JWT for an id_token expiring at exp expires,
// issued at now: up to spread (a fraction) of the token's remaining
// lifetime earlier, by the fraction u (in [0, 1)) of that, rounded up to
// the second the JWT carries (rounded down, a token with a second or two
// left would get a user JWT that expired on arrival, and any short one
// less than the half MaxExpirySpread promises), never after exp.
func spreadExpiry(exp, now time.Time, spread, u float64) time.Time {
	early := time.Duration(float64(exp.Sub(now)) * spread * u)
	if early <= 0 {
		return exp
	}
	at := exp.Add(-early)
	if up := at.Truncate(time.Second); up.Before(at) {
		at = up.Add(time.Second)
	}
	if at.After(exp) {
		return exp
	}
	return at
}
