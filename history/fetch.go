package history

import (
	"context"
	"fmt"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// fetchReport renders a device's fetch-ahead report of a revision (ADR
// 0027): when the fetch started and, once done or failed, when it ended.
// It is progress only and changes nothing of the rollout.
func (f *deviceFold) fetchReport(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.WorkloadFetch](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Deployment, e.Generation, e.RevisionID = d.Namespace+"/"+d.Deployment, d.Generation, d.RevisionID
	started := d.Started.UTC().Format(time.RFC3339)
	ended, took := "", ""
	if d.Ended != nil {
		ended, took = d.Ended.UTC().Format(time.RFC3339), d.Ended.Sub(d.Started).Round(time.Second).String()
	}
	switch d.Phase {
	case events.FetchDone:
		e.Summary = fmt.Sprintf("%s generation %d fetched ahead: %d of %d images pulled, %s to %s (%s)", e.Deployment, d.Generation,
			d.Pulled, d.Images, started, ended, took)
	case events.FetchFailed:
		e.Summary = fmt.Sprintf("%s generation %d fetch ahead failed, %s to %s: %s", e.Deployment, d.Generation, started, ended,
			cutText(d.Error, maxFetchError))
	default:
		e.Summary = fmt.Sprintf("%s generation %d fetch ahead started at %s (%d images)", e.Deployment, d.Generation, started, d.Images)
	}
	return true
}

// maxFetchError bounds the error text of a fetch report on a timeline.
const maxFetchError = 512

// cutText returns s cut to at most n bytes, on a rune boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
