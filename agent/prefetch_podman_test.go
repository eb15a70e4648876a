package agent_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// putValue writes the device's fleet-intent value v.
func (d *podmanDaemon) putValue(v events.DeviceIntent) {
	t := d.w.t
	t.Helper()
	kv, err := d.st.JetStream().KeyValue(d.w.ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	v.Device = d.w.device
	if v.Deployments == nil {
		v.Deployments = []events.IntentEntry{}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(d.w.ctx, d.w.device, b); err != nil {
		t.Fatal(err)
	}
}

// fetches lists the device's fetch reports of generation gen.
func (d *podmanDaemon) fetches(gen int64) []events.WorkloadFetch {
	var out []events.WorkloadFetch
	for r, err := range d.st.Replay(d.w.ctx, "fleet.report."+d.w.device+".fetch", events.FromStart()) {
		if err != nil {
			return out
		}
		if f, err := events.Decode[events.WorkloadFetch](r.Event); err == nil && f.Generation == gen {
			out = append(out, f)
		}
	}
	return out
}

// TestAFetchAheadEntryPullsTheImagesAndTheReleaseSwitchesWithoutAPullOnRealPodman:
// a revision offered to fetch ahead is pulled (and reported Started, then
// Fetched) while nothing of it runs and the device keeps its revision;
// when the revision is handed to the device, the switch pulls nothing.
func TestAFetchAheadEntryPullsTheImagesAndTheReleaseSwitchesWithoutAPullOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	reg := podmantest.TestRegistry(t)
	ref := podmantest.PushImage(t, reg, "fleet-agent-test/prefetch", "FROM "+podmantest.BaseImage+"\nLABEL fleet.test.unique="+randomHex()+"\n"+runsFile)
	_ = podmanRemoveImage(w, ref)
	counter := &pullCounter{Runtime: w.rt}
	w.r.Runtime = counter
	w.r.Credentials = creds{"hub": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)}
	d := w.runDaemon(t, agent.Options{HeartbeatInterval: time.Hour})

	old := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: podmantest.BuildImage(t, "runs", runsFile)}}}}
	d.putValue(events.DeviceIntent{Deployments: []events.IntentEntry{w.entry(1, old)}})
	if testenv.Poll(w.ctx, w.left(), func() bool { return d.reported(1, events.WorkloadConverged) }) != nil {
		t.Fatalf("generation 1 never converged: %+v", d.reports(1))
	}
	oldID := w.byName()[w.name("api")].ID

	next := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: ref, ImagePullSecret: "hub"}}}}
	e2 := w.entry(2, next)
	d.putValue(events.DeviceIntent{Deployments: []events.IntentEntry{w.entry(1, old)},
		Fetch: []events.FetchEntry{{Namespace: e2.Namespace, Name: e2.Name, UID: e2.UID, Generation: 2, RevisionID: e2.RevisionID, Score: e2.Score}}})
	fetched := func() bool {
		for _, f := range d.fetches(2) {
			if f.Phase == events.FetchDone {
				return true
			}
		}
		return false
	}
	if testenv.Poll(w.ctx, w.left(), fetched) != nil {
		t.Fatalf("generation 2 was never fetched: %+v", d.fetches(2))
	}
	if ok, err := w.rt.ImageExists(w.ctx, ref); err != nil || !ok {
		t.Fatalf("the image is not on the device after its fetch (%v)", err)
	}
	reps := d.fetches(2)
	if len(reps) != 2 || reps[0].Phase != events.FetchStarted || reps[1].Phase != events.FetchDone || reps[1].Images != 1 || reps[1].Pulled != 1 ||
		reps[1].Ended == nil || reps[1].Ended.Before(reps[1].Started) {
		t.Errorf("fetch reports %+v, want Started then Fetched of the one image pulled", reps)
	}
	if c := w.byName()[w.name("api")]; c.ID != oldID {
		t.Errorf("the fetch touched the running service: %+v", c)
	}
	if d.reported(2, events.WorkloadApplying) {
		t.Error("generation 2 was applied before it was handed to the device")
	}

	pulls := counter.pulls.Load()
	released := time.Now()
	d.putValue(events.DeviceIntent{Deployments: []events.IntentEntry{e2}})
	if testenv.Poll(w.ctx, w.left(), func() bool { return d.reported(2, events.WorkloadConverged) }) != nil {
		t.Fatalf("generation 2 never converged: %+v", d.reports(2))
	}
	t.Logf("handed → Converged with the images fetched ahead: %s", time.Since(released).Round(time.Millisecond))
	if n := counter.pulls.Load(); n != pulls {
		t.Errorf("the switch pulled %d times, want none: the images were fetched ahead", n-pulls)
	}
}
