package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/score"
)

func TestImagesOfReplacedRevisionsArePrunedAfterASwitch(t *testing.T) {
	images := []string{"reg.example/api:v1", "reg.example/api:v2", "reg.example/worker:v1"}
	tests := []struct {
		name    string
		keep    int
		noPrune bool
		foreign bool
		gens    int // revisions applied: api:v1, api:v2, worker:v1 in turn
		want    map[string]bool
	}{
		{"the revision before the previous one loses its image; the current and the previous keep theirs", 0, false, false, 3,
			map[string]bool{images[0]: false, images[1]: true, images[2]: true}},
		{"two revisions in, nothing is removed", 0, false, false, 2,
			map[string]bool{images[0]: true, images[1]: true, images[2]: true}},
		{"with one revision kept the previous one's image goes at once", 1, false, false, 2,
			map[string]bool{images[0]: false, images[1]: true, images[2]: true}},
		{"an image a container the agent does not own uses is kept", 0, false, true, 3,
			map[string]bool{images[0]: true, images[1]: true, images[2]: true}},
		{"without a pruner nothing is removed", 0, true, false, 3,
			map[string]bool{images[0]: true, images[1]: true, images[2]: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			if !tt.noPrune {
				w.r.Pruner = w.rt
			}
			w.r.KeepRevisions = tt.keep
			if tt.foreign {
				if _, err := w.rt.Create(w.ctx, runtime.ContainerSpec{Name: "someone-elses", Image: images[0]}); err != nil {
					t.Fatal(err)
				}
			}
			for gen := range tt.gens {
				s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: images[gen]}}}}
				if err := w.r.Apply(w.ctx, entry(t, int64(gen+1), s)); err != nil {
					t.Fatalf("generation %d: %v", gen+1, err)
				}
			}
			got := map[string]bool{}
			for _, img := range images {
				ok, err := w.rt.ImageExists(w.ctx, img)
				if err != nil {
					t.Fatal(err)
				}
				got[img] = ok
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("images present (-want +got):\n%s", diff)
			}
		})
	}
}

// refusingPruner fails every removal with err.
type refusingPruner struct{ err error }

func (p refusingPruner) DeleteImage(context.Context, string) error { return p.err }

func TestAFailedPruneIsCountedAndNeverFailsTheSwitch(t *testing.T) {
	const failures = `fleet_agent_image_prune_failures_total`
	tests := []struct {
		name string
		err  error
		want float64
	}{
		{"a removal the engine refuses for another reason is counted", errors.New("engine: permission denied"), 1},
		{"an image a container still uses is not a failure", runtime.ErrImageInUse, 0},
		{"an image already gone is not a failure", runtime.ErrImageNotFound, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			m := agent.NewMetrics(nil)
			reg := registry(t, m)
			w.r.Metrics, w.r.Pruner = m, refusingPruner{tt.err}
			for gen, img := range []string{"reg.example/api:v1", "reg.example/api:v2", "reg.example/worker:v1"} {
				s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: img}}}}
				if err := w.r.Apply(w.ctx, entry(t, int64(gen+1), s)); err != nil {
					t.Fatalf("generation %d: the switch failed: %v", gen+1, err)
				}
			}
			got, ok := series(t, reg)[failures]
			if !ok {
				t.Fatalf("no series %s", failures)
			}
			if got != tt.want {
				t.Errorf("%s = %v, want %v", failures, got, tt.want)
			}
		})
	}
}
