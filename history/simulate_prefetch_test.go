package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// prefetchDevice plays an agent with a slow link (ADR 0027): every
// revision's images take download to pull, ahead of the release when its
// fetch entry offers them (outside a closed fetch window), else when the
// revision is handed to it; a switch to a revision it fetched waits only
// for the fetch's end. The download is the simulated device's own work
// (a timer in its goroutine), not a wait of the test: the test waits for
// the rollouts' results by polling.
type prefetchDevice struct {
	f        *fleetRun
	name     string
	download time.Duration
	errs     chan<- error

	mu      sync.Mutex
	fetches map[int64]chan struct{} // closed when the fetch ended
	handled map[int64]bool
}

// run answers the device's fleet-intent values until ctx ends.
func (d *prefetchDevice) run(ctx context.Context) {
	w, err := d.f.kv.Watch(ctx, d.name)
	if err != nil {
		d.errs <- err
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-w.Updates():
			if e == nil {
				continue
			}
			var v events.DeviceIntent
			if json.Unmarshal(e.Value(), &v) != nil {
				continue
			}
			for _, fe := range v.Fetch {
				d.fetch(ctx, fe)
			}
			for _, de := range v.Deployments {
				d.deploy(ctx, de)
			}
		}
	}
}

func (d *prefetchDevice) report(ctx context.Context, data events.Data, uid string, gen int64) {
	ev, err := events.New(events.Keys{Device: d.name}, data, events.WithCorrelation(uid, gen))
	if err == nil {
		err = d.f.store.Report(ctx, ev)
	}
	if err != nil && ctx.Err() == nil {
		d.errs <- err
	}
}

// pull is the download: done once it took d.download, or ctx ended.
func (d *prefetchDevice) pull(ctx context.Context) {
	t := time.NewTimer(d.download)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (d *prefetchDevice) fetch(ctx context.Context, e events.FetchEntry) {
	if e.Window != nil {
		if open, _, err := e.Window.Open(time.Now().UTC()); err != nil || !open {
			return // the fetch waits for its window
		}
	}
	d.mu.Lock()
	if _, ok := d.fetches[e.Generation]; ok || d.handled[e.Generation] {
		d.mu.Unlock()
		return
	}
	done := make(chan struct{})
	d.fetches[e.Generation] = done
	d.mu.Unlock()
	go func() {
		defer close(done)
		f := events.WorkloadFetch{Namespace: e.Namespace, Deployment: e.Name, UID: e.UID, Generation: e.Generation, RevisionID: e.RevisionID,
			Phase: events.FetchStarted, Images: 2, Started: time.Now().UTC()}
		d.report(ctx, f, e.UID, e.Generation)
		d.pull(ctx)
		ended := time.Now().UTC()
		f.Phase, f.Pulled, f.Ended = events.FetchDone, 2, &ended
		d.report(ctx, f, e.UID, e.Generation)
	}()
}

func (d *prefetchDevice) deploy(ctx context.Context, e events.IntentEntry) {
	d.mu.Lock()
	if d.handled[e.Generation] {
		d.mu.Unlock()
		return
	}
	d.handled[e.Generation] = true
	fetched := d.fetches[e.Generation]
	d.mu.Unlock()
	go func() {
		st := events.WorkloadStatus{Namespace: e.Namespace, Deployment: e.Name, UID: e.UID, Generation: e.Generation, RevisionID: e.RevisionID,
			Phase: events.WorkloadApplying, Since: time.Now().UTC()}
		d.report(ctx, st, e.UID, e.Generation)
		if fetched != nil {
			select { // the pass's pull joins the fetch
			case <-fetched:
			case <-ctx.Done():
			}
		} else {
			d.pull(ctx)
		}
		st.Phase, st.Since = events.WorkloadConverged, time.Now().UTC()
		d.report(ctx, st, e.UID, e.Generation)
	}()
}

// TestASimulationOfRecordedRolloutsWithPrefetchPredictsTheirStageTimes
// records, with the operator's rollout runner, four rollouts of lab/api
// over 4 devices whose images take 1.5 s to pull (d1 the canary): v1
// without prefetch, v2 and v1 again with prefetch (the devices fetch at
// the revision's creation, the canary is handed the revision at once and
// pulls while switching, the others switch at the release without a
// pull), then v2 with prefetch and a fetch window that opens six hours
// later (nobody fetches ahead: each pulls when it is handed the revision).
// The simulation of generations 3 and 4, each against the history before
// it, predicts every stage time within simTolerance: the release of
// generation 3 takes the switch only, that of generation 4 the pull too.
func TestASimulationOfRecordedRolloutsWithPrefetchPredictsTheirStageTimes(t *testing.T) {
	f := startFleet(t)
	const download = 1500 * time.Millisecond
	all := []string{"d1", "d2", "d3", "d4"}
	errs := make(chan error, 16)
	ctx, cancel := context.WithCancel(f.ctx)
	var wg sync.WaitGroup
	for _, name := range all {
		d := &prefetchDevice{f: f, name: name, download: download, errs: errs, fetches: map[int64]chan struct{}{}, handled: map[int64]bool{}}
		wg.Go(func() { d.run(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	closed := time.Now().UTC().Add(6 * time.Hour).Format("15:04")
	for _, g := range []struct {
		gen      int64
		image    string
		prefetch bool
		window   *events.MaintenanceWindow
	}{
		{1, "registry.example.com/api:v1", false, nil},
		{2, "registry.example.com/api:v2", true, nil},
		{3, "registry.example.com/api:v1", true, nil},
		{4, "registry.example.com/api:v2", true, &events.MaintenanceWindow{Start: closed, Duration: "1h"}},
	} {
		rev := events.DeploymentRevisionCreated{UID: "a1b2c3", Generation: g.gen, RevisionID: fmt.Sprintf("%d-a1b2", g.gen),
			ScoreDigest: fmt.Sprintf("sha256:api%d", g.gen),
			Score:       json.RawMessage(fmt.Sprintf(`{"type":"PodmanV0","data":{"services":[{"name":"api","image":"%s"},{"name":"sidecar","image":"registry.example.com/proxy:1"}]}}`, g.image)),
			Targets:     all, Canaries: []string{"d1"}, Prefetch: g.prefetch, FetchWindow: g.window}
		f.append(events.Keys{Namespace: "lab", Name: "api"}, rev, events.WithCorrelation(rev.UID, rev.Generation))
		f.waitPhase("api", g.gen, fleetv1.PhaseSucceeded)
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}

	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Revisions) != 4 {
		t.Fatalf("%d revisions simulated, want 4", len(v.Revisions))
	}
	for _, c := range v.Revisions[2:] {
		if c.RecordedEnd != c.PredictedEnd {
			t.Errorf("generation %d: recorded end %s, predicted %s", c.Generation, c.RecordedEnd, c.PredictedEnd)
		}
		for _, m := range c.Marks {
			t.Logf("generation %d %s %s: recorded +%s, predicted +%s, error %s", c.Generation, m.Stage, m.Mark, m.Recorded, m.Predicted, m.Error)
			if m.Recorded < 0 || m.Predicted < 0 {
				t.Errorf("generation %d %s %s: recorded %s, predicted %s: one side never reached it", c.Generation, m.Stage, m.Mark, m.Recorded, m.Predicted)
			} else if m.Error > simTolerance || m.Error < -simTolerance {
				t.Errorf("generation %d %s %s: predicted +%s, recorded +%s: error %s beyond %s", c.Generation, m.Stage, m.Mark, m.Predicted, m.Recorded, m.Error, simTolerance)
			}
		}
		p := c.Prediction.Fetch
		if p == nil {
			t.Fatalf("generation %d: the prediction says nothing of the fetch ahead", c.Generation)
		}
		t.Logf("generation %d: fetch %+v", c.Generation, *p)
		// Generation 3: every target fetched at the creation (the canary
		// still fetching when handed it); generation 4: none before it
		// could switch, the fetch window opening hours later.
		fetchedAhead, unfetched := 4, 0
		if c.Generation == 4 {
			fetchedAhead, unfetched = 0, 4
		}
		if p.Fetched+p.Joined != fetchedAhead || p.Unfetched != unfetched || p.NoHistory != 0 {
			t.Errorf("generation %d: fetch %+v: want %d fetched ahead (or joined), %d unfetched", c.Generation, *p, fetchedAhead, unfetched)
		}
	}
	t.Logf("generations 2-4: %d marks compared, mean absolute error %s, max %s", v.Compared, v.MeanAbsError, v.MaxAbsError)
}
