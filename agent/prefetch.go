package agent

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

// DefaultFetchConcurrency is how many images the agent fetches ahead at
// once when Options.FetchConcurrency is 0; MaxFetchConcurrency is the most
// Options.Validate takes (more pulls at once only share the same link).
const (
	DefaultFetchConcurrency = 2
	MaxFetchConcurrency     = 16
)

// fetchKey names one revision offered to fetch ahead.
type fetchKey struct {
	ns, name, uid string
	gen           int64
}

func fetchKeyOf(e events.FetchEntry) fetchKey {
	return fetchKey{e.Namespace, e.Name, e.UID, e.Generation}
}

// fetcher pulls the images of the intent's fetch-ahead entries (ADR 0027)
// beside the passes, never starting or stopping a container: a revision the
// device is not handed yet is only downloaded, so that its switch, when the
// rollout hands it over, does not wait for the link. At most limit pulls
// run at once. Nothing is kept on disk: after an agent restart the intent
// offers the entries again, images already present are not pulled again,
// and the engine resumes from the layers it already holds. A revision is
// reported Fetched once per run; one whose fetch failed is tried again on
// the next pass that feeds it (a resync at the latest).
type fetcher struct {
	d     *daemon
	limit int
	wake  chan struct{}

	mu      sync.Mutex
	entries []events.FetchEntry
	done    map[fetchKey]bool
	// running is the revision being fetched and the cancel of its fetch.
	running *fetchKey
	cancel  context.CancelFunc
}

func newFetcher(d *daemon) *fetcher {
	limit := d.o.FetchConcurrency
	if limit <= 0 {
		limit = DefaultFetchConcurrency
	}
	return &fetcher{d: d, limit: limit, wake: make(chan struct{}, 1), done: map[fetchKey]bool{}}
}

// feed takes the intent's fetch entries and Deployment entries: the fetch
// of a revision no longer offered (replaced or withdrawn) is cancelled, one
// of a revision just handed to the device goes on (the pass's pull of the
// same image waits for the engine's), and every entry not fetched yet is
// fetched in intent order.
func (f *fetcher) feed(entries []events.FetchEntry, handed []events.IntentEntry) {
	f.d.windows.forget("fetch/")
	f.mu.Lock()
	f.entries = slices.Clone(entries)
	on := map[fetchKey]bool{}
	for _, e := range entries {
		on[fetchKeyOf(e)] = true
	}
	for _, e := range handed {
		if k := (fetchKey{e.Namespace, e.Name, e.UID, e.Generation}); f.running != nil && *f.running == k {
			on[k] = true
		}
	}
	for k := range f.done {
		if !on[k] {
			delete(f.done, k)
		}
	}
	if f.running != nil && !on[*f.running] {
		f.cancel()
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// run fetches until ctx ends.
func (f *fetcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		for {
			e, ok := f.next(ctx)
			if !ok {
				break
			}
			f.fetchOne(ctx, e)
		}
	}
}

// next claims the first entry not fetched yet whose fetch window, if it
// has one, is open.
func (f *fetcher) next(ctx context.Context) (events.FetchEntry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil {
		return events.FetchEntry{}, false
	}
	now := f.d.clock()
	for _, e := range f.entries {
		if f.done[fetchKeyOf(e)] {
			continue
		}
		if opens, wait := windowWait(e.Window, now); wait {
			// Outside its fetch window (ADR 0029): the window watch
			// wakes a pass, and so the fetcher, when it opens.
			f.d.windows.note("fetch/"+e.Namespace+"/"+e.Name, e.Window, opens)
			continue
		}
		k := fetchKeyOf(e)
		f.running = &k
		f.done[k] = true // failed or not, once per feed of the revision
		return e, true
	}
	return events.FetchEntry{}, false
}

// fetchOne pulls the missing images of e and reports the fetch.
func (f *fetcher) fetchOne(ctx context.Context, e events.FetchEntry) {
	fctx, cancel := context.WithCancel(ctx)
	f.mu.Lock()
	f.cancel = cancel
	f.mu.Unlock()
	defer func() {
		cancel()
		f.mu.Lock()
		f.running, f.cancel = nil, nil
		f.mu.Unlock()
	}()
	r := f.d.o.Reconciler
	st := events.WorkloadFetch{Namespace: e.Namespace, Deployment: e.Name, UID: e.UID, Generation: e.Generation, RevisionID: e.RevisionID,
		Started: f.d.clock().UTC()}
	fail := func(err error) {
		f.mu.Lock()
		delete(f.done, fetchKeyOf(e)) // tried again on the next feed
		f.mu.Unlock()
		if fctx.Err() != nil {
			return // withdrawn or the agent stops: nothing to say
		}
		end := f.d.clock().UTC()
		st.Phase, st.Ended, st.Error = events.FetchFailed, &end, err.Error()
		f.d.log.WarnContext(ctx, "fetch ahead", "deployment", e.Namespace+"/"+e.Name, "generation", e.Generation, "error", err)
		f.report(ctx, st)
	}
	if events.ValidateToken(events.TokenNamespace, e.Namespace) != nil || events.ValidateToken(events.TokenName, e.Name) != nil {
		return // decodeIntent checks the entries it runs; a fetch entry naming no valid Deployment is only skipped
	}
	s, err := score.Parse(e.Score)
	if err != nil {
		fail(err)
		return
	}
	svcs := fetchImages(s)
	st.Images = len(svcs)
	var missing []score.Service
	for _, svc := range svcs {
		ok, err := r.rt().ImageExists(fctx, svc.Image)
		if err != nil {
			fail(err)
			return
		}
		if !ok {
			missing = append(missing, svc)
		}
	}
	if len(missing) > 0 {
		f.report(ctx, st) // Started
		sem := make(chan struct{}, f.limit)
		errs := make([]error, len(missing))
		var wg sync.WaitGroup
		for i, svc := range missing {
			wg.Go(func() {
				select {
				case sem <- struct{}{}:
				case <-fctx.Done():
					errs[i] = fctx.Err()
					return
				}
				defer func() { <-sem }()
				errs[i] = r.ensureImage(fctx, svc)
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			fail(err)
			return
		}
		st.Pulled = len(missing)
	}
	if fctx.Err() != nil {
		return
	}
	end := f.d.clock().UTC()
	st.Phase, st.Ended = events.FetchDone, &end
	f.report(ctx, st)
}

// report publishes a fetch report of the device, correlated with its
// revision.
func (f *fetcher) report(ctx context.Context, st events.WorkloadFetch) {
	if st.Phase == "" {
		st.Phase = events.FetchStarted
	}
	f.d.report(ctx, events.Keys{Device: f.d.o.Device}, st, events.WithCorrelation(st.UID, st.Generation))
}

// fetchImages lists the distinct images of s (the init container first)
// with the pull secret each needs.
func fetchImages(s score.Score) []score.Service {
	var out []score.Service
	seen := map[string]bool{}
	add := func(svc score.Service) {
		if seen[svc.Image] {
			return
		}
		seen[svc.Image] = true
		out = append(out, score.Service{Name: svc.Name, Image: svc.Image, ImagePullSecret: svc.ImagePullSecret})
	}
	if s.Data.InitContainer != nil {
		add(*s.Data.InitContainer)
	}
	for _, svc := range s.Data.Services {
		add(svc)
	}
	return out
}
