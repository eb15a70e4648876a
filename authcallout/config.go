package authcallout

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Config is the fleet-authcallout configuration file (JSON). Secrets are
// never in it: it names files holding them. cmd/fleet-authcallout binds
// flags over it.
type Config struct {
	// NATSURL is the server (or comma-separated cluster URLs).
	NATSURL string `json:"nats_url"`
	// CalloutUser is the auth_users member in the callout account.
	CalloutUser string `json:"callout_user"`
	// CalloutPasswordFile holds CalloutUser's password.
	CalloutPasswordFile string `json:"callout_password_file"`
	// ReaderUser reads fleet-identity (in the users' account).
	ReaderUser string `json:"reader_user"`
	// ReaderPasswordFile holds ReaderUser's password.
	ReaderPasswordFile string `json:"reader_password_file"`
	// SystemUser, a system-account user allowed $SYS.REQ.SERVER.*.KICK,
	// enables live revocation (with the reader following fleet-identity).
	// Optional.
	SystemUser string `json:"system_user,omitempty"`
	// SystemPasswordFile holds SystemUser's password.
	SystemPasswordFile string `json:"system_password_file,omitempty"`
	// IssuerSeedFile holds the issuer account seed (SA...).
	IssuerSeedFile string `json:"issuer_seed_file"`
	// XKeySeedFile holds the curve seed (SX...); empty: unencrypted.
	XKeySeedFile string `json:"xkey_seed_file,omitempty"`
	// Account is the control-plane account the operator role is placed
	// in. Default FLEET (AccountFleet).
	Account string `json:"account"`
	// DeviceAccount is the account devices are placed in. Default DEVICES
	// (AccountDevices); it must differ from Account.
	DeviceAccount string `json:"device_account"`
	// OIDCIssuer is the expected iss.
	OIDCIssuer string `json:"oidc_issuer"`
	// Audience is the expected aud (the Fleet project id).
	Audience string `json:"audience"`
	// JWKSURL overrides discovery.
	JWKSURL string `json:"jwks_url,omitempty"`
	// Algorithms is the allow-list (default RS256).
	Algorithms []string `json:"algorithms,omitempty"`
	// ClockSkew (Go duration, default 30s).
	ClockSkew Duration `json:"clock_skew,omitempty"`
	// QueueGroup (default DefaultQueueGroup).
	QueueGroup string `json:"queue_group,omitempty"`
	// Workers processing requests at once (default 4×CPUs).
	Workers int `json:"workers,omitempty"`
	// ExpirySpread is Options.ExpirySpread (default
	// DefaultExpirySpread; negative: none).
	ExpirySpread float64 `json:"expiry_spread,omitempty"`
	// LogFormat is "json" (default) or "text".
	LogFormat string `json:"log_format,omitempty"`
	// LogLevel is "info" (default) or "debug".
	LogLevel string `json:"log_level,omitempty"`
	// MetricsAddr is the host:port serving Prometheus metrics at /metrics
	// (port 0 picks a free one); "" or "0" (default): off.
	MetricsAddr string `json:"metrics_addr,omitempty"`
}

// Duration is a time.Duration written as a Go duration string in JSON.
type Duration time.Duration

// UnmarshalJSON parses "30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: want a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// LoadConfig reads a JSON configuration file; unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("authcallout: config: %w", err)
	}
	defer f.Close()
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("authcallout: config %s: %w", path, err)
	}
	return c, nil
}

// Validate names every missing field.
func (c Config) Validate() error {
	var errs []error
	req := func(v, name string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("authcallout: config: %s is required", name))
		}
	}
	req(c.NATSURL, "nats_url")
	req(c.CalloutUser, "callout_user")
	req(c.CalloutPasswordFile, "callout_password_file")
	req(c.ReaderUser, "reader_user")
	req(c.ReaderPasswordFile, "reader_password_file")
	req(c.IssuerSeedFile, "issuer_seed_file")
	req(c.OIDCIssuer, "oidc_issuer")
	if (c.SystemUser == "") != (c.SystemPasswordFile == "") {
		errs = append(errs, errors.New("authcallout: config: system_user and system_password_file go together"))
	}
	req(c.Audience, "audience")
	switch c.LogFormat {
	case "", "json", "text":
	default:
		errs = append(errs, fmt.Errorf("authcallout: config: log_format %q: use json or text", c.LogFormat))
	}
	switch c.LogLevel {
	case "", "info", "debug":
	default:
		errs = append(errs, fmt.Errorf("authcallout: config: log_level %q: use info or debug", c.LogLevel))
	}
	return errors.Join(errs...)
}

// ReadSecretFile reads a secret (password, seed) from a file, trimming
// surrounding white space. Errors name the file, never the content.
func ReadSecretFile(path, what string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("authcallout: %s: %w", what, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("authcallout: %s: %s is empty", what, path)
	}
	return s, nil
}
