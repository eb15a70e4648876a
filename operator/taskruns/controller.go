// Package taskruns owns the operator's TaskRun role: the controller that
// freezes a new TaskRun's targets in one taskrun.created event (after its
// taskrun.targets chunks when they do not fit in it, ADR 0010) and a
// deletion in one taskrun.deleted event (Reconciler), and the runner that
// folds TaskRun intent and the devices' task reports into each TaskRun's
// status (Runner). Package operator wires both; it imports no other role.
package taskruns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/kstatus"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
)

// FieldOwner is the server-side-apply field manager of the TaskRun
// status field the TaskRun controller owns: the TargetsResolved condition.
// The rest of the status belongs to the TaskRun runner
// (FieldOwnerStatus).
const FieldOwner = "fleet-operator-taskruns"

// Reconciler freezes a new TaskRun's targets in one taskrun.created
// event (chunked as a revision is when they do not fit), and a deletion in
// one taskrun.deleted event. Both are appended with
// the expected last sequence of the TaskRun's intent subject, so racing
// operators and restarts append each exactly once per TaskRun UID. The
// rollout runner folds these events into the devices' fleet-intent values
// (next to the Deployment entries); the TaskRun runner folds the devices'
// task reports into the status.
type Reconciler struct {
	Client client.Client
	Store  intent.Store
	// Reader, when set, replays a TaskRun's intent subject when its last
	// record does not decode, to decide from the last one that does.
	Reader intent.Reader
	// Groups is the group source; nil means none is configured (a TaskRun
	// that sets allowedGroups then matches no device).
	Groups targets.GroupSource
	Log    *slog.Logger
	// Skips counts intent records that do not decode. Nil-safe.
	Skips *events.SkipCounter
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.TaskRun{}).
		Named("fleet-taskrun").
		Complete(r)
}

// Reconcile does the work of reconcile; a stall (requeue.Stall: a lost
// append race, a wait) is a requeue after its wait, without an error.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return requeue.Result(r.reconcile(ctx, req))
}

// reconcile does one action per call: add the finalizer, append the
// creation (targets frozen), write TargetsResolved, or append the deletion
// and drop the finalizer.
func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var tr fleetv1.TaskRun
	op, found, err := r.opener().Open(ctx, req, &tr)
	if !found || err != nil {
		return ctrl.Result{}, err
	}
	subject, head := op.Subject, op.Head
	if !tr.DeletionTimestamp.IsZero() {
		return r.delete(ctx, &tr, op)
	}
	if wrote, err := intent.AddFinalizer(ctx, r.Client, &tr, fleetv1.FinalizerTaskRun); wrote || err != nil {
		return ctrl.Result{}, err
	}

	created, appended := taskRunCreated(head.Last, &tr)
	var res targets.Resolution
	if !appended {
		var devices fleetv1.DeviceList
		if err := r.Client.List(ctx, &devices, client.InNamespace(tr.Namespace)); err != nil {
			return ctrl.Result{}, fmt.Errorf("list devices of %s: %w", tr.Namespace, err)
		}
		res, err = targets.ResolveTaskRun(ctx, &tr, devices.Items, r.Groups)
		if err != nil {
			return ctrl.Result{}, err
		}
		evs, err := taskRunEvents(&tr, res)
		if err != nil {
			return ctrl.Result{}, err
		}
		err = intent.AppendInOrder(ctx, r.Store, evs, head.Seq)
		if errors.Is(err, events.ErrConflict) {
			r.Log.InfoContext(ctx, "taskrun append conflict, re-reading", "taskrun", req.String())
			return ctrl.Result{}, requeue.Conflict(err)
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("append creation of %s: %w", req, err)
		}
		created, _ = events.Decode[events.TaskRunCreated](evs[len(evs)-1])
		r.Log.InfoContext(ctx, "taskrun created", "taskrun", req.String(), "task", created.Task, "targets", len(res.Targets), "chunks", created.TargetChunks)
	} else {
		if c := meta.FindStatusCondition(tr.Status.Conditions, fleetv1.ConditionTargetsResolved); c != nil && c.ObservedGeneration == created.Generation {
			return ctrl.Result{}, nil // creation and condition are done
		}
		if created.Targets, err = wholeTargets(ctx, r.Reader, subject, created, head.Last.Sequence); err != nil {
			return ctrl.Result{}, err
		}
		res = taskRunResolutionOf(created, &tr, r.Groups)
	}
	return ctrl.Result{}, r.patchStatus(ctx, &tr, created, res)
}

// taskRunCreated reports whether the last intent event is this TaskRun's
// (this UID's) creation.
func taskRunCreated(last *events.Record, tr *fleetv1.TaskRun) (events.TaskRunCreated, bool) {
	if last == nil || last.Event.Type != events.TypeTaskRunCreated {
		return events.TaskRunCreated{}, false
	}
	c, err := events.Decode[events.TaskRunCreated](last.Event)
	if err != nil || c.UID != string(tr.UID) {
		return events.TaskRunCreated{}, false
	}
	return c, true
}

// chunkBytes is the most id bytes a target chunk carries: 0 is
// events.ChunkBytes (tests set less, to chunk a handful of devices).
var chunkBytes = 0

// SetChunkBytes makes TaskRun creations chunk their targets past n id bytes
// until the returned restore is called (0: the default). It is a test hook:
// not safe for concurrent use with the controllers.
func SetChunkBytes(n int) (restore func()) {
	old := chunkBytes
	chunkBytes = n
	return func() { chunkBytes = old }
}

// taskRunEvents builds the creation of a TaskRun with its frozen targets
// and, for an agent-upgrade, its artifact: one taskrun.created event when
// the targets fit in it (the bytes of before), else the taskrun.targets
// chunks and then the creation naming them (ADR 0010).
func taskRunEvents(tr *fleetv1.TaskRun, res targets.Resolution) ([]events.Event, error) {
	data := events.TaskRunCreated{UID: string(tr.UID), Generation: tr.Generation, Task: string(tr.Spec.Task), Targets: nonNil(res.Targets)}
	if a := tr.Spec.Agent; a != nil {
		data.Agent = &events.AgentArtifact{URL: a.URL, SHA256: a.SHA256, Version: a.Version}
	}
	if w := tr.Spec.MaintenanceWindow; w != nil {
		data.Window = &events.MaintenanceWindow{Start: w.Start, Duration: w.Duration}
	}
	keys := events.Keys{Namespace: tr.Namespace, Name: tr.Name}
	opt := events.WithCorrelation(string(tr.UID), tr.Generation)
	created, chunks := events.ChunkTaskRun(data, chunkBytes)
	evs := make([]events.Event, 0, len(chunks)+1)
	for _, c := range chunks {
		ev, err := events.New(keys, c, opt)
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	ev, err := events.New(keys, created, opt)
	if err != nil {
		return nil, err
	}
	if b, err := ev.Marshal(); err == nil && len(b) > events.MaxEventSize-4096 {
		// The targets are in chunks: only a spec near 1 MiB gets here.
		// Refuse loudly rather than truncate.
		return nil, fmt.Errorf("taskrun %s/%s: its creation does not fit in one event (%d bytes)", tr.Namespace, tr.Name, len(b))
	}
	return append(evs, ev), nil
}

// opener opens a TaskRun and its intent subject (intent.ReadHead).
func (r *Reconciler) opener() intent.Opener {
	return intent.Opener{Client: r.Client, Store: r.Store, Reader: r.Reader, Skips: r.Skips, Log: r.Log,
		Kind: "taskrun", SubjectOf: events.TaskRunIntentSubject}
}

// wholeTargets returns the frozen targets of a creation appended earlier:
// its own, or for a chunked one, those its chunks carry (the subject read
// again through an events.RevisionAssembler up to the creation at seq).
func wholeTargets(ctx context.Context, reader intent.Reader, subject string, c events.TaskRunCreated, seq uint64) ([]string, error) {
	if c.TargetChunks == 0 {
		return c.Targets, nil
	}
	if reader == nil {
		return nil, fmt.Errorf("taskrun uid %s names %d target chunks and the controller has no intent reader to read them", c.UID, c.TargetChunks)
	}
	var a events.RevisionAssembler
	for rec, err := range reader.Replay(ctx, subject, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read intent of %s: %w", subject, err)
		}
		whole, ok, err := a.Add(rec.Event)
		if rec.Sequence < seq {
			continue
		}
		if err == nil && !ok {
			err = fmt.Errorf("%w: record %d of %s is not a TaskRun creation", events.ErrChunksMissing, rec.Sequence, subject)
		}
		if err != nil {
			return nil, fmt.Errorf("taskrun uid %s: %w", c.UID, err)
		}
		d, err := events.Decode[events.TaskRunCreated](whole)
		if err != nil {
			return nil, fmt.Errorf("taskrun uid %s: %w", c.UID, err)
		}
		return d.Targets, nil
	}
	return nil, fmt.Errorf("%w: creation %d of %s was not read again", events.ErrChunksMissing, seq, subject)
}

// taskRunResolutionOf rebuilds the condition of a creation appended earlier
// (the operator stopped before it patched the status).
func taskRunResolutionOf(c events.TaskRunCreated, tr *fleetv1.TaskRun, groups targets.GroupSource) targets.Resolution {
	r := targets.Resolution{Targets: c.Targets, Reason: fleetv1.ReasonResolved, Message: fmt.Sprintf("%d targets", len(c.Targets))}
	if len(c.Targets) == 0 {
		r.Reason, r.Message = targets.Unresolved(tr.Spec.AllowedGroups, groups, "TaskRun")
	}
	return r
}

func (r *Reconciler) delete(ctx context.Context, tr *fleetv1.TaskRun, op intent.Opened) (ctrl.Result, error) {
	return intent.Delete(ctx, r.Client, r.Store, r.Log, tr, fleetv1.FinalizerTaskRun, op,
		func(del events.TaskRunDeleted) string { return del.UID },
		func() (events.Event, error) {
			return events.New(events.Keys{Namespace: tr.Namespace, Name: tr.Name}, events.TaskRunDeleted{UID: string(tr.UID)},
				events.WithCorrelation(string(tr.UID), tr.Generation))
		})
}

// patchStatus applies the TargetsResolved condition.
func (r *Reconciler) patchStatus(ctx context.Context, tr *fleetv1.TaskRun, c events.TaskRunCreated, res targets.Resolution) error {
	return kstatus.ApplyTargetsResolved(ctx, r.Client, "TaskRun", tr, tr.Status.Conditions, c.Generation, res.Reason, res.Message, FieldOwner)
}

// nonNil returns s, or an empty slice when s is nil: the event's targets
// are a JSON array, never null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
