package agent

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// DefaultKeepRevisions is how many revisions of each Deployment keep their
// images after a switch (--keep-revisions): the current one and the
// previous one, for a rollback without a pull.
const DefaultKeepRevisions = 2

// imageHistory is, per Deployment, the images of its last revisions on
// this device, oldest first, as the agent saw them switch (in memory: an
// agent that restarts starts it again from the containers it finds).
type imageHistory struct {
	mu    sync.Mutex // guards byDep
	byDep map[[2]string][][]string
}

// keepRevisions is KeepRevisions, DefaultKeepRevisions when 0.
func (r *Reconciler) keepRevisions() int {
	if r.KeepRevisions <= 0 {
		return DefaultKeepRevisions
	}
	return r.KeepRevisions
}

// imagesOf lists the images of containers, sorted, each once.
func imagesOf(cs map[string]runtime.Container) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Image)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// revisionImages lists the images of res, sorted, each once.
func revisionImages(res resolved) []string {
	var out []string
	if res.init != nil {
		out = append(out, res.init.Image)
	}
	for _, s := range res.services {
		out = append(out, s.Image)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// prune runs after a pass of e converged (ADR 0028): it records the
// revision's images (after before, the images of the containers the pass
// found, when the history of e is empty) and removes the images of the
// revisions older than the last KeepRevisions that no kept revision of
// any Deployment and no container (of any state, the agent's or not)
// uses. Only images of revisions the agent replaced are candidates. A
// failed removal is logged and counted (MetricPruneFailures), never an
// error: pruning never fails a switch.
// Without Pruner it does nothing.
func (r *Reconciler) prune(ctx context.Context, e events.IntentEntry, res resolved, before []string) {
	if r.Pruner == nil {
		return
	}
	cur := revisionImages(res)
	dep := [2]string{e.Namespace, e.Name}
	h := &r.history
	h.mu.Lock()
	if h.byDep == nil {
		h.byDep = map[[2]string][][]string{}
	}
	revs := h.byDep[dep]
	if len(revs) == 0 && len(before) > 0 && !slices.Equal(before, cur) {
		revs = append(revs, before)
	}
	if len(revs) == 0 || !slices.Equal(revs[len(revs)-1], cur) {
		revs = append(revs, cur)
	}
	var dropped []string
	if keep := r.keepRevisions(); len(revs) > keep {
		for _, old := range revs[:len(revs)-keep] {
			dropped = append(dropped, old...)
		}
		revs = slices.Clone(revs[len(revs)-keep:])
	}
	h.byDep[dep] = revs
	kept := map[string]bool{}
	for _, rs := range h.byDep {
		for _, imgs := range rs {
			for _, img := range imgs {
				kept[img] = true
			}
		}
	}
	h.mu.Unlock()
	if len(dropped) == 0 {
		return
	}
	all, err := r.rt().List(ctx)
	if err != nil {
		r.log().WarnContext(ctx, "cannot list containers to prune images; keeping them", "error", err)
		r.Metrics.pruneFailed(ctx)
		return
	}
	for _, c := range all {
		kept[c.Image] = true
	}
	slices.Sort(dropped)
	for _, img := range slices.Compact(dropped) {
		if kept[img] {
			continue
		}
		err := r.Pruner.DeleteImage(ctx, img)
		switch {
		case err == nil:
			r.log().InfoContext(ctx, "removed the image of a replaced revision", "deployment", e.Namespace+"/"+e.Name, "image", img)
		case errors.Is(err, runtime.ErrImageInUse), errors.Is(err, runtime.ErrImageNotFound):
		default:
			r.log().WarnContext(ctx, "cannot remove the image of a replaced revision", "deployment", e.Namespace+"/"+e.Name, "image", img, "error", err)
			r.Metrics.pruneFailed(ctx)
		}
	}
}
