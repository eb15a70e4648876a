package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nationtech/harmony-fleet/identity/tokencheck"
)

const tokenUsage = `usage: fleet token --key-file <device key file> [flags]

Mints an id_token from a device's machine key file exactly as the agent
does (JWT-profile grant at the issuer, scope openid and the project
audience), prints the claims that matter (never the key; the token itself
only with --raw) and checks it as the auth callout would: the callout's
verifier against the issuer's key set, then, given NATS credentials that may
read fleet-identity, the subject's identity entry.

Exit status 0: the callout would accept the device (or, without NATS
credentials, its token). 1: a check fails (it is named) or a flag is wrong.

  fleet token --key-file edge-1.json
  fleet token --key-file edge-1.json --nats-url nats://127.0.0.1:4222 \
      --user fleet-dev-admin --password-file ~/.cache/fleet-dev/secrets/admin.password
  fleet token --key-file edge-1.json --raw    the token alone on stdout, the report on stderr

The NATS connection also takes NATS_URL, NATS_USER, NATS_PASSWORD and
NATS_CREDS from the environment, as fleet dev's printed export line sets them.

flags:
`

// runToken is `fleet token`.
func runToken(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return tokenCmd(ctx, args, os.Stdout, os.Stderr, os.Getenv)
}

// tokenOptions are the flags of `fleet token`: what to check, and how to
// print it.
type tokenOptions struct {
	tokencheck.Options
	passwordFile string
	raw, json    bool
}

// tokenCmd runs `fleet token` with its arguments: the report of
// tokencheck.Diagnose goes to out (to errOut with --raw, out then holding
// only the token), usage to errOut; getenv supplies the NATS_* defaults.
func tokenCmd(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) error {
	o, err := parseToken(args, errOut, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rep, err := tokencheck.Diagnose(ctx, o.Options)
	if rep == nil {
		return err
	}
	reportOut := out
	if o.raw {
		if tok := rep.Token(); tok != "" {
			fmt.Fprintln(out, tok)
		}
		reportOut = errOut
	}
	if o.json {
		enc := json.NewEncoder(reportOut)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(rep); werr != nil {
			return fmt.Errorf("token: write the report: %w", werr)
		}
	} else {
		rep.WriteText(reportOut)
	}
	if err != nil {
		return err
	}
	if c := rep.Failed(); c != nil {
		return &tokencheck.Refused{Check: *c}
	}
	return nil
}

// parseToken parses and checks the flags; flag.ErrHelp (unwrapped) when
// help was asked for and printed.
func parseToken(args []string, errOut io.Writer, getenv func(string) string) (tokenOptions, error) {
	var o tokenOptions
	fs := flag.NewFlagSet("fleet token", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), tokenUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.KeyFile, "key-file", "", "the device's machine key file (written by fleet enroll; fleet dev: <data>/devices/<device>.key.json)")
	fs.StringVar(&o.Issuer, "issuer", "", "OpenID Provider to mint at and verify against (default: the key file's issuer)")
	fs.StringVar(&o.Audience, "audience", "", "project audience to ask for and to expect, as the callout's audience (default: the key file's audience)")
	fs.StringVar(&o.JWKSURL, "jwks-url", "", "key set to verify with, as the callout's jwks_url (default: the issuer's discovery document)")
	fs.StringVar(&o.Device, "device", "", "device id the agent runs as (default: the key file's device)")
	fs.BoolVar(&o.raw, "raw", false, "print the raw id_token, alone on stdout (the report goes to stderr); the token is a bearer secret")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	// Defaults from the environment are applied after parsing, so that
	// usage text never prints them (a URL with a password).
	fs.StringVar(&o.NATSURL, "nats-url", "", "NATS server to read fleet-identity from (default: env NATS_URL; none: the identity is not checked)")
	fs.StringVar(&o.User, "user", "", "NATS user allowed to read fleet-identity (default: env NATS_USER; fleet dev: fleet-dev-admin)")
	fs.StringVar(&o.passwordFile, "password-file", "", "file holding --user's password (default: env NATS_PASSWORD; fleet dev: <data>/secrets/admin.password)")
	fs.StringVar(&o.Creds, "creds", "", "NATS user credentials file, instead of --user/--password-file (default: env NATS_CREDS)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return o, flag.ErrHelp
	} else if err != nil {
		return o, fmt.Errorf("token: %w", err)
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, fmt.Errorf("token: unexpected argument %q: give the key file with --key-file", fs.Arg(0))
	}
	if o.KeyFile == "" {
		fs.Usage()
		return o, errors.New("token: --key-file is required: give the device's machine key file (fleet dev: <data>/devices/<device>.key.json)")
	}
	if o.raw && o.json {
		return o, errors.New("token: --raw and --json exclude each other: --raw prints the token alone, --json the report")
	}
	if o.Timeout <= 0 {
		return o, fmt.Errorf("token: --timeout %s: give a positive duration such as 30s", o.Timeout)
	}
	o.NATSURL = cmp.Or(o.NATSURL, getenv("NATS_URL"))
	o.User = cmp.Or(o.User, getenv("NATS_USER"))
	o.Creds = cmp.Or(o.Creds, getenv("NATS_CREDS"))
	if o.passwordFile != "" {
		b, err := os.ReadFile(o.passwordFile)
		if err != nil {
			return o, fmt.Errorf("token: --password-file: %w", err)
		}
		if o.Password = strings.TrimSpace(string(b)); o.Password == "" {
			return o, fmt.Errorf("token: --password-file %s is empty: give the file holding --user's password", o.passwordFile)
		}
	} else {
		o.Password = getenv("NATS_PASSWORD")
	}
	switch {
	case o.Creds != "" && (o.User != "" || o.Password != ""):
		return o, errors.New("token: --creds and --user/--password-file exclude each other (check NATS_CREDS, NATS_USER, NATS_PASSWORD): give one")
	case o.Password != "" && o.User == "":
		return o, errors.New("token: a password needs --user (fleet dev: --user fleet-dev-admin, or NATS_USER)")
	case o.NATSURL == "" && (o.User != "" || o.Creds != ""):
		return o, errors.New("token: NATS credentials without a server: give --nats-url (or NATS_URL) to check fleet-identity")
	}
	return o, nil
}
