package followers

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/follow"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
)

// Watch judges every Device change against the Follow Deployments
// of its namespace, from the informer cache (no request to the API server
// per device), and tells the rollout runner what changed (Out): a Device
// that comes to match or stops matching. It sends a change only when the
// judgement differs from the last one it sent for that Device and
// Deployment, so a Device's status updates (heartbeats) cost a cache read.
// Device labels are placement data: a device that relabels itself joins a
// Follow Deployment only as any device with those labels would, and
// quarantine, the duplicate mark and allowedGroups are checked as at a
// freeze.
type Watch struct {
	Client client.Client
	// Groups is the group source (nil: allowedGroups matches nothing).
	Groups targets.GroupSource
	// Out receives the changes; the runner reads it (RolloutRunner.Follows).
	Out chan<- follow.Change

	once    sync.Once
	mu      sync.Mutex // guards the fields below
	started time.Time
	// labels are each Device's labels when last seen; sent the last
	// judgement sent per Deployment and Device.
	labels map[types.NamespacedName]deviceSeen
	sent   map[followKey]sentJudgement
}

type deviceSeen struct {
	labels      map[string]string
	quarantined bool
	duplicate   bool
}

type followKey struct{ ns, deployment, device string }

type sentJudgement struct {
	uid        string
	generation int64
	match      bool
	reason     string
}

// SetupWithManager registers the watch.
func (w *Watch) SetupWithManager(mgr ctrl.Manager) error {
	w.init()
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Device{}).
		Named("fleet-rollout-follow").
		Complete(w)
}

// Reconcile judges one Device against the Follow Deployments of its
// namespace and sends what changed.
func (w *Watch) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w.init()
	var d fleetv1.Device
	gone := false
	switch err := w.Client.Get(ctx, req.NamespacedName, &d); {
	case apierrors.IsNotFound(err):
		gone = true
	case err != nil:
		return ctrl.Result{}, err
	case !d.DeletionTimestamp.IsZero():
		gone = true
	}
	var deps fleetv1.DeploymentList
	if err := w.Client.List(ctx, &deps, client.InNamespace(req.Namespace)); err != nil {
		return ctrl.Result{}, fmt.Errorf("list deployments of %s: %w", req.Namespace, err)
	}
	w.mu.Lock()
	prev, hadPrev := w.labels[req.NamespacedName]
	w.mu.Unlock()
	d.Namespace, d.Name = req.Namespace, req.Name // also for a Device gone (not found)
	cur := deviceSeen{labels: d.Labels, duplicate: isDuplicate(&d)}
	_, cur.quarantined = d.Labels[fleetv1.LabelBlacklist]
	for i := range deps.Items {
		dep := &deps.Items[i]
		if dep.Spec.Rollout.Targets != fleetv1.RolloutTargetsFollow || !dep.DeletionTimestamp.IsZero() {
			continue
		}
		ch, err := w.judge(ctx, dep, &d, gone, prev, hadPrev, cur)
		if err != nil {
			return ctrl.Result{}, err
		}
		key := followKey{req.Namespace, dep.Name, req.Name}
		sj := sentJudgement{uid: ch.UID, generation: ch.Generation, match: ch.Match, reason: ch.Reason}
		w.mu.Lock()
		last, ok := w.sent[key]
		w.mu.Unlock()
		if ok && last.uid == sj.uid && last.generation == sj.generation && last.match == sj.match && (sj.match || last.reason == sj.reason) {
			continue
		}
		select {
		case w.Out <- ch:
		case <-ctx.Done():
			return ctrl.Result{}, ctx.Err()
		}
		w.mu.Lock()
		w.sent[key] = sj
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if gone {
		delete(w.labels, req.NamespacedName)
		for k := range w.sent {
			if k.ns == req.Namespace && k.device == req.Name {
				delete(w.sent, k)
			}
		}
		return ctrl.Result{}, nil
	}
	w.labels[req.NamespacedName] = cur
	return ctrl.Result{}, nil
}

// init sets the watch up once: a Device created after this (to the
// second of its creationTimestamp) and seen for the first time joins as
// "Device created"; one seen first at the start "matches the target
// selector".
func (w *Watch) init() {
	w.once.Do(func() {
		w.started = time.Now().Truncate(time.Second)
		w.labels = map[types.NamespacedName]deviceSeen{}
		w.sent = map[followKey]sentJudgement{}
	})
}

// judge is the change Device d (gone: deleted) is to Follow Deployment
// dep; prev is the Device as last seen (hadPrev: it was).
func (w *Watch) judge(ctx context.Context, dep *fleetv1.Deployment, d *fleetv1.Device, gone bool, prev deviceSeen, hadPrev bool, cur deviceSeen) (follow.Change, error) {
	ch := follow.Change{Namespace: dep.Namespace, Deployment: dep.Name, UID: string(dep.UID), Generation: dep.Generation, Device: d.Name}
	if gone {
		ch.Immediate, ch.Reason = true, "Device deleted"
		return ch, nil
	}
	sel := dep.Spec.TargetSelector.MatchLabels
	change := labelChange(sel, prev.labels, cur.labels, hadPrev)
	switch {
	case !targets.Matches(sel, d.Labels):
		ch.Reason, ch.Change = "labels no longer match the target selector: "+change, change
		return ch, nil
	case cur.quarantined:
		ch.Immediate, ch.Reason, ch.Change = true, "Device quarantined", fleetv1.LabelBlacklist+"="+d.Labels[fleetv1.LabelBlacklist]
		return ch, nil
	case cur.duplicate:
		ch.Immediate, ch.Reason = true, "Device marked "+fleetv1.ReasonDuplicateDeviceID
		return ch, nil
	}
	if len(dep.Spec.AllowedGroups) > 0 {
		member := false
		if w.Groups != nil {
			gs, err := w.Groups.Groups(ctx, d.Namespace, d.Name)
			if err != nil {
				return ch, fmt.Errorf("groups of device %s/%s: %w", d.Namespace, d.Name, err)
			}
			member = slices.ContainsFunc(gs, func(g string) bool { return slices.Contains(dep.Spec.AllowedGroups, g) })
		}
		if !member {
			ch.Immediate, ch.Reason = true, "not a member of an allowed group ("+strings.Join(dep.Spec.AllowedGroups, ", ")+")"
			return ch, nil
		}
	}
	ch.Match, ch.Change = true, change
	switch {
	case !hadPrev && !d.CreationTimestamp.Time.Before(w.started):
		ch.Reason = "Device created"
	case !hadPrev:
		ch.Reason = "matches the target selector"
	case prev.quarantined:
		ch.Reason, ch.Change = "quarantine lifted", "blacklist removed"
	case prev.duplicate:
		ch.Reason, ch.Change = "duplicate device id cleared", ""
	case !targets.Matches(sel, prev.labels):
		ch.Reason = "labels changed"
	default:
		ch.Reason = "group membership"
	}
	return ch, nil
}

// labelChange words the change of the selector's labels from prev to cur
// ("role=analyzer (was role=other)"); with no prev, cur's selector labels.
func labelChange(sel, prev, cur map[string]string, hadPrev bool) string {
	keys := slices.Sorted(maps.Keys(sel))
	var now, was []string
	for _, k := range keys {
		v, ok := cur[k]
		pv, pok := prev[k]
		if hadPrev && ok == pok && v == pv {
			continue
		}
		now = append(now, labelText(k, v, ok))
		was = append(was, labelText(k, pv, pok))
	}
	if !hadPrev || len(now) == 0 {
		var all []string
		for _, k := range keys {
			v, ok := cur[k]
			all = append(all, labelText(k, v, ok))
		}
		return strings.Join(all, ",")
	}
	return strings.Join(now, ",") + " (was " + strings.Join(was, ",") + ")"
}

func labelText(k, v string, ok bool) string {
	if !ok {
		return k + " unset"
	}
	return k + "=" + v
}

// isDuplicate reports whether the Device controller marked d as a
// duplicate device id (Online condition, reason DuplicateDeviceID).
func isDuplicate(d *fleetv1.Device) bool {
	c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionOnline)
	return c != nil && c.Reason == fleetv1.ReasonDuplicateDeviceID
}
