package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/history"
)

const exposureUsage = `usage: fleet history exposure --image <reference or digest> [--score-digest <digest>] [--deployment <namespace>/<name>] [flags]

Every device that ran a matching revision, under which Deployment and
revision, from when to when (replaced, rolled back, removed or still
running), with totals: the recall list after a CVE or a bad release.
Answered from the JetStream streams alone.

  --image registry.example.com/api:v2        that repository and tag
  --image registry.example.com/api@sha256:…  that repository pinned to that digest
  --image sha256:…                           any image pinned to that digest
  --image registry.example.com/api           every tag and digest of the repository

flags:
`

// longHistoryTimeout is the default --timeout of exposure and simulate,
// which may read every report stored.
const longHistoryTimeout = 10 * time.Minute

// exposureOptions are the flags of `fleet history exposure`.
type exposureOptions struct {
	historyOptions
	image, scoreDigest, deployment string
}

// exposureCmd runs `fleet history exposure`.
func exposureCmd(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) error {
	var o exposureOptions
	fs := newHistoryFlags(&o.historyOptions, errOut)
	fs.Init("fleet history exposure", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), exposureUsage)
		fs.PrintDefaults()
	}
	// A question over the whole history takes longer than a timeline.
	o.timeout = longHistoryTimeout
	fs.Lookup("timeout").DefValue = longHistoryTimeout.String()
	fs.Lookup("at").Usage = "answer as of this RFC 3339 time: only events stored until then, open intervals measured to it"
	fs.StringVar(&o.image, "image", "", "exposure only: an image reference or digest (repo:tag, repo@sha256:…, sha256:…, or repo for every tag)")
	fs.StringVar(&o.scoreDigest, "score-digest", "", "exposure only: a revision's score digest (sha256:…)")
	fs.StringVar(&o.deployment, "deployment", "", "exposure only: only this Deployment's revisions, <namespace>/<name>")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("history exposure: unexpected argument %q: say what to look for with --image, --score-digest or --deployment", pos[0])
	}
	o.server = cmp.Or(o.server, getenv("NATS_URL"), defaultNATSURL)
	o.user = cmp.Or(o.user, getenv("NATS_USER"))
	o.password = cmp.Or(o.password, getenv("NATS_PASSWORD"))
	o.creds = cmp.Or(o.creds, getenv("NATS_CREDS"))
	format, err := history.ParseFormat(o.output)
	if err != nil {
		return fmt.Errorf("history exposure: -o: %w", err)
	}
	q := history.ExposureQuery{Image: o.image, ScoreDigest: o.scoreDigest, Deployment: o.deployment}
	if o.at != "" {
		at, err := time.Parse(time.RFC3339Nano, o.at)
		if err != nil {
			return fmt.Errorf("history exposure: --at %q is not an RFC 3339 time: use e.g. 2026-01-02T15:04:05Z", o.at)
		}
		q.At = at
	}
	if err := q.Validate(); err != nil {
		return fmt.Errorf("history exposure: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	h, closeHistory, err := openHistory(o.historyOptions, "history exposure", errOut)
	if err != nil {
		return err
	}
	defer closeHistory()
	answer, err := h.Exposure(ctx, q)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w (the Fleet streams are missing on %s: is --server a Fleet control plane with its streams provisioned?)", err, redact(o.server))
	}
	if err != nil {
		return err
	}
	return history.Write(out, answer, format)
}
