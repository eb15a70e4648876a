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
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

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
	// When it is a GroupWatcher too, a membership change alone (no
	// Device change) has the Devices it concerns judged again.
	Groups targets.GroupSource
	// Out receives the changes; the runner reads it (RolloutRunner.Follows).
	Out chan<- follow.Change

	once    sync.Once
	mu      sync.Mutex // guards the fields below
	started time.Time
	// labels are each Device's labels when last seen; sent the last
	// judgement sent per Deployment and Device (pruned when the Device or
	// the Deployment goes, or the Deployment stops following).
	labels map[types.NamespacedName]deviceSeen
	sent   map[types.NamespacedName]map[string]sentJudgement
	// regroup are the Devices whose groups changed and that are not
	// judged again yet; wake signals one.
	regroup map[types.NamespacedName]bool
	wake    chan struct{}
}

// GroupWatcher is a group source that says when a device's groups change
// (targets.StaticGroups does): the watch judges that Device again.
type GroupWatcher interface {
	// Subscribe calls fn with every device whose groups change, until
	// cancel is called; fn must not block.
	Subscribe(fn func(namespace, device string)) (cancel func())
}

type deviceSeen struct {
	labels      map[string]string
	quarantined bool
	duplicate   bool
	// groups are the device's groups when last seen, if a Follow
	// Deployment of its namespace sets allowedGroups (hasGroups).
	groups    []string
	hasGroups bool
}

type sentJudgement struct {
	uid        string
	generation int64
	match      bool
	reason     string
}

// SetupWithManager registers the watch: on Devices, on the group source
// when it is a GroupWatcher, and on Deployments: one deleted or no longer
// following has its judgements forgotten, and one that starts following
// (created, switched to Follow) or gets a new generation has every Device
// of its namespace judged again (DevicesToJudge).
func (w *Watch) SetupWithManager(mgr ctrl.Manager) error {
	w.init()
	judgeAll := func(ctx context.Context, namespace string, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		reqs, err := w.DevicesToJudge(ctx, namespace)
		if err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "follow watch: the Devices to judge again", "namespace", namespace)
		}
		for _, r := range reqs {
			q.Add(r)
		}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Device{}).
		Named("fleet-rollout-follow").
		Watches(&fleetv1.Deployment{}, handler.Funcs{
			CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				if d, ok := e.Object.(*fleetv1.Deployment); ok && follows(d) {
					judgeAll(ctx, d.Namespace, q)
				}
			},
			DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				w.forget(types.NamespacedName{Namespace: e.Object.GetNamespace(), Name: e.Object.GetName()})
			},
			UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				d, ok := e.ObjectNew.(*fleetv1.Deployment)
				if !ok {
					return
				}
				if !follows(d) {
					w.forget(types.NamespacedName{Namespace: d.Namespace, Name: d.Name})
					return
				}
				if old, ok := e.ObjectOld.(*fleetv1.Deployment); ok && (!follows(old) || old.Generation != d.Generation) {
					judgeAll(ctx, d.Namespace, q)
				}
			},
		})
	if gw, ok := w.Groups.(GroupWatcher); ok {
		regroups := make(chan event.TypedGenericEvent[*fleetv1.Device])
		cancel := gw.Subscribe(w.noteRegroup)
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			defer cancel()
			return w.forwardRegroups(ctx, regroups)
		})); err != nil {
			cancel()
			return fmt.Errorf("follow watch: %w", err)
		}
		b = b.WatchesRawSource(source.Channel(regroups, &handler.TypedEnqueueRequestForObject[*fleetv1.Device]{}))
	}
	return b.Complete(w)
}

// follows reports whether d is a Follow Deployment not being deleted.
func follows(d *fleetv1.Deployment) bool {
	return d.Spec.Rollout.Targets == fleetv1.RolloutTargetsFollow && d.DeletionTimestamp.IsZero()
}

// DevicesToJudge are the requests of every Device of namespace, from the
// cache: what a Deployment that starts following, or gets a new
// generation, has judged again. A Device the Deployment's freeze did not
// see (its cache held it a moment after the Deployment, or the Device was
// judged before the Deployment reached the cache) joins then instead of
// never: a Device and a Follow Deployment applied together are a GitOps
// repository's first sync.
func (w *Watch) DevicesToJudge(ctx context.Context, namespace string) ([]reconcile.Request, error) {
	var devs fleetv1.DeviceList
	if err := w.Client.List(ctx, &devs, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list devices of %s: %w", namespace, err)
	}
	out := make([]reconcile.Request, 0, len(devs.Items))
	for i := range devs.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: devs.Items[i].Name}})
	}
	return out, nil
}

// noteRegroup keeps a Device whose groups changed for forwardRegroups.
func (w *Watch) noteRegroup(namespace, device string) {
	w.mu.Lock()
	w.regroup[types.NamespacedName{Namespace: namespace, Name: device}] = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// forwardRegroups hands the Devices whose groups changed to the
// controller's queue until ctx ends.
func (w *Watch) forwardRegroups(ctx context.Context, out chan<- event.TypedGenericEvent[*fleetv1.Device]) error {
	for {
		w.mu.Lock()
		batch := w.regroup
		w.regroup = map[types.NamespacedName]bool{}
		w.mu.Unlock()
		for _, k := range slices.SortedFunc(maps.Keys(batch), func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) }) {
			d := &fleetv1.Device{}
			d.Namespace, d.Name = k.Namespace, k.Name
			select {
			case out <- event.TypedGenericEvent[*fleetv1.Device]{Object: d}:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return nil
		}
	}
}

// forget drops the judgements sent for Deployment dep.
func (w *Watch) forget(dep types.NamespacedName) {
	w.mu.Lock()
	delete(w.sent, dep)
	w.mu.Unlock()
}

// Remembered is how many judgements (Deployment, Device) the watch
// remembers: one per Device of a Follow Deployment it judged, and none
// of a Deployment deleted or no longer following.
func (w *Watch) Remembered() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, m := range w.sent {
		n += len(m)
	}
	return n
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
	following := map[types.NamespacedName]bool{}
	for i := range deps.Items {
		dep := &deps.Items[i]
		if dep.Spec.Rollout.Targets != fleetv1.RolloutTargetsFollow || !dep.DeletionTimestamp.IsZero() {
			continue
		}
		following[types.NamespacedName{Namespace: dep.Namespace, Name: dep.Name}] = true
		if len(dep.Spec.AllowedGroups) > 0 && !cur.hasGroups && !gone && w.Groups != nil {
			gs, err := w.Groups.Groups(ctx, d.Namespace, d.Name)
			if err != nil {
				return ctrl.Result{}, fmt.Errorf("groups of device %s/%s: %w", d.Namespace, d.Name, err)
			}
			cur.groups, cur.hasGroups = slices.Sorted(slices.Values(gs)), true
		}
	}
	for i := range deps.Items {
		dep := &deps.Items[i]
		key := types.NamespacedName{Namespace: dep.Namespace, Name: dep.Name}
		if !following[key] {
			continue
		}
		w.mu.Lock()
		last, ok := w.sent[key][req.Name]
		w.mu.Unlock()
		ch := w.judge(dep, &d, gone, prev, hadPrev && ok && last.uid == string(dep.UID), cur)
		sj := sentJudgement{uid: ch.UID, generation: ch.Generation, match: ch.Match, reason: ch.Reason}
		if ok && last.uid == sj.uid && last.generation == sj.generation && last.match == sj.match && (sj.match || last.reason == sj.reason) {
			continue
		}
		select {
		case w.Out <- ch:
		case <-ctx.Done():
			return ctrl.Result{}, ctx.Err()
		}
		w.mu.Lock()
		if w.sent[key] == nil {
			w.sent[key] = map[string]sentJudgement{}
		}
		w.sent[key][req.Name] = sj
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Deployments of the namespace no longer following (deleted,
	// switched to Frozen): their judgements are forgotten (the Deployment
	// watch does it too; this catches a judgement sent meanwhile).
	for key := range w.sent {
		if key.Namespace == req.Namespace && !following[key] {
			delete(w.sent, key)
		}
	}
	if gone {
		delete(w.labels, req.NamespacedName)
		for key, m := range w.sent {
			if key.Namespace == req.Namespace {
				delete(m, req.Name)
			}
			if len(m) == 0 {
				delete(w.sent, key)
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
		w.sent = map[types.NamespacedName]map[string]sentJudgement{}
		w.regroup = map[types.NamespacedName]bool{}
		w.wake = make(chan struct{}, 1)
	})
}

// judge is the change Device d (gone: deleted) is to Follow Deployment
// dep; prev is the Device as last seen, and hadPrev is true only when it
// was seen and judged against dep before: a Device never judged against
// dep (dep reached the cache after it) is judged as one seen for the first
// time, since what changed is not known.
func (w *Watch) judge(dep *fleetv1.Deployment, d *fleetv1.Device, gone bool, prev deviceSeen, hadPrev bool, cur deviceSeen) follow.Change {
	ch := follow.Change{Namespace: dep.Namespace, Deployment: dep.Name, UID: string(dep.UID), Generation: dep.Generation, Device: d.Name}
	if gone {
		ch.Immediate, ch.Reason = true, "Device deleted"
		return ch
	}
	sel := dep.Spec.TargetSelector.MatchLabels
	change := labelChange(sel, prev.labels, cur.labels, hadPrev)
	switch {
	case !targets.Matches(sel, d.Labels):
		ch.Reason, ch.Change = "labels no longer match the target selector: "+change, change
		return ch
	case cur.quarantined:
		ch.Immediate, ch.Reason, ch.Change = true, "Device quarantined", fleetv1.LabelBlacklist+"="+d.Labels[fleetv1.LabelBlacklist]
		return ch
	case cur.duplicate:
		ch.Immediate, ch.Reason = true, "Device marked "+fleetv1.ReasonDuplicateDeviceID
		return ch
	}
	if len(dep.Spec.AllowedGroups) > 0 {
		// cur.groups is nil without a group source: fail closed.
		if !slices.ContainsFunc(cur.groups, func(g string) bool { return slices.Contains(dep.Spec.AllowedGroups, g) }) {
			ch.Immediate, ch.Reason = true, "not a member of an allowed group ("+strings.Join(dep.Spec.AllowedGroups, ", ")+")"
			if hadPrev && prev.hasGroups && !slices.Equal(prev.groups, cur.groups) {
				ch.Change = groupChange(prev.groups, cur.groups, true)
			}
			return ch
		}
	}
	ch.Match, ch.Change, ch.Labels = true, change, maps.Clone(d.Labels)
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
	case cur.hasGroups && (!prev.hasGroups || !slices.Equal(prev.groups, cur.groups)):
		ch.Reason, ch.Change = "group membership", groupChange(prev.groups, cur.groups, prev.hasGroups)
	default:
		// Nothing of the Device changed: a new generation judges it again.
		ch.Reason = "matches the target selector"
	}
	return ch
}

// groupChange words a change of a device's groups ("groups lyon,paris
// (was none)"); without prev, its groups now.
func groupChange(prev, cur []string, hadPrev bool) string {
	list := func(gs []string) string {
		if len(gs) == 0 {
			return "none"
		}
		return strings.Join(gs, ",")
	}
	if !hadPrev {
		return "groups " + list(cur)
	}
	return "groups " + list(cur) + " (was " + list(prev) + ")"
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
