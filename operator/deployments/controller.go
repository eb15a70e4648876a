package deployments

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
	"github.com/nationtech/harmony-fleet/operator/policysync"
)

// FieldOwnerRevisions is the server-side-apply field manager of the status
// fields the Deployment controller owns: the TargetsResolved condition.
// observedGeneration, the revision, counts, phase and Ready belong to the
// rollout runner and are written in one patch, so they always describe the
// same revision: a generation is observed only together with a phase of
// that generation.
const FieldOwnerRevisions = "fleet-operator-revisions"

// DeploymentReconciler turns each Deployment generation into one revision
// event, and a deletion into one deletion event.
type DeploymentReconciler struct {
	Client client.Client
	Store  intent.Store
	// Groups is the group source; nil means none is configured.
	Groups targets.GroupSource
	// WaitForPolicy holds a generation that references pull secrets until
	// the policy sync has written its OpenBao policy (PullSecretPolicy
	// condition of that generation), so no device is asked to pull before
	// it may read the credential. Set when the sync is enabled.
	WaitForPolicy bool
	Log           *slog.Logger
	// Reader, when set, replays a Deployment's intent subject when its last
	// record does not decode, to decide from the last one that does.
	Reader intent.Reader
	// Skips counts intent records that do not decode. Nil-safe.
	Skips *events.SkipCounter
	// Metrics, when set, counts the revisions appended.
	Metrics *Metrics
	// Stamp, when set, is applied last to the events the controller
	// builds (Options.EventStamp, tests only).
	Stamp events.Option
}

// SetupWithManager registers the controller.
func (r *DeploymentReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Deployment{}).
		Named("fleet-deployment").
		Complete(r)
}

// Reconcile does the work of reconcile; a stall (requeue.Stall: a lost
// append race, a wait) is a requeue after its wait, without an error.
func (r *DeploymentReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return requeue.Result(r.reconcile(ctx, req))
}

// reconcile does one action per call and requeues: add the finalizer, append
// the revision of the current generation, or append the deletion and drop the
// finalizer.
func (r *DeploymentReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d fleetv1.Deployment
	op, found, err := r.opener().Open(ctx, req, &d)
	if !found || err != nil {
		return ctrl.Result{}, err
	}
	head := op.Head
	if !d.DeletionTimestamp.IsZero() {
		return r.delete(ctx, &d, op)
	}
	if wrote, err := intent.AddFinalizer(ctx, r.Client, &d, fleetv1.FinalizerDeployment); wrote || err != nil {
		return ctrl.Result{}, err
	}

	rev, appended := intent.AppendedRevision(head.Last, &d)
	res := targets.Resolution{}
	if !appended && r.WaitForPolicy && !policysync.Ready(&d) {
		// The policy sync's status update triggers the next reconcile;
		// the requeue covers an OpenBao that is down.
		r.Log.DebugContext(ctx, "revision waits for the pull-secret policy", "deployment", req.String(), "generation", d.Generation)
		return ctrl.Result{}, requeue.ForPolicy()
	}
	if !appended {
		var devices fleetv1.DeviceList
		if err := r.Client.List(ctx, &devices, client.InNamespace(d.Namespace)); err != nil {
			return ctrl.Result{}, fmt.Errorf("list devices of %s: %w", d.Namespace, err)
		}
		res, err = ResolveTargets(ctx, &d, devices.Items, r.Groups)
		if err != nil {
			return ctrl.Result{}, err
		}
		evs, data, err := RevisionEvents(&d, res, r.Stamp)
		if err != nil {
			return ctrl.Result{}, err
		}
		err = intent.AppendInOrder(ctx, r.Store, evs, head.Seq)
		if errors.Is(err, events.ErrConflict) {
			// Another writer appended first: re-read and re-decide.
			r.Metrics.revision("conflict")
			r.Log.InfoContext(ctx, "revision append conflict, re-reading", "deployment", req.String())
			return ctrl.Result{}, requeue.Conflict(err)
		}
		if err != nil {
			r.Metrics.revision("failed")
			return ctrl.Result{}, fmt.Errorf("append revision of %s: %w", req, err)
		}
		r.Metrics.revision("appended")
		rev = data
		r.Log.InfoContext(ctx, "revision created", "deployment", req.String(), "generation", d.Generation,
			"revision", rev.RevisionID, "targets", len(rev.Targets), "canaries", len(rev.Canaries), "chunks", len(evs)-1)
	} else {
		if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionTargetsResolved); c != nil && c.ObservedGeneration == rev.Generation {
			return ctrl.Result{}, nil // revision and status are done
		}
		res = resolutionOf(rev, &d, r.Groups)
	}
	return ctrl.Result{}, r.patchStatus(ctx, &d, rev, res)
}

// AppendRevision appends a revision's events (RevisionEvents) in order,
// each expecting the subject's last sequence, from seq (the head's):
// intent.AppendInOrder.
func AppendRevision(ctx context.Context, store intent.Store, evs []events.Event, seq uint64) error {
	return intent.AppendInOrder(ctx, store, evs, seq)
}

// opener opens a Deployment and its intent subject (intent.ReadHead).
func (r *DeploymentReconciler) opener() intent.Opener {
	return intent.Opener{Client: r.Client, Store: r.Store, Reader: r.Reader, Skips: r.Skips, Log: r.Log,
		Kind: "deployment", SubjectOf: events.DeploymentIntentSubject}
}

// resolutionOf rebuilds the condition of a revision appended earlier (the
// operator stopped before it patched the status).
func resolutionOf(rev events.DeploymentRevisionCreated, d *fleetv1.Deployment, groups targets.GroupSource) targets.Resolution {
	r := targets.Resolution{Targets: rev.Targets, Canaries: rev.Canaries, Reason: fleetv1.ReasonResolved,
		Message: fmt.Sprintf("%d targets, %d canaries", len(rev.Targets), len(rev.Canaries))}
	switch {
	case rev.TargetChunks > 0:
		// The lists are in the chunks before the revision; the message
		// says how many chunks rather than read them again.
		r.Message = fmt.Sprintf("targets and canaries in %d chunk events", rev.TargetChunks)
	case len(rev.Targets) == 0:
		r.Reason, r.Message = targets.Unresolved(d.Spec.AllowedGroups, groups, "revision")
	}
	if rev.Plan != nil && r.Reason == fleetv1.ReasonResolved {
		r.Message += fmt.Sprintf("; a plan of %d batches", len(rev.Plan.Batches))
	}
	return r
}

func (r *DeploymentReconciler) delete(ctx context.Context, d *fleetv1.Deployment, op intent.Opened) (ctrl.Result, error) {
	return intent.Delete(ctx, r.Client, r.Store, r.Log, d, fleetv1.FinalizerDeployment, op,
		func(del events.DeploymentDeleted) string { return del.UID },
		func() (events.Event, error) {
			return events.New(events.Keys{Namespace: d.Namespace, Name: d.Name},
				events.DeploymentDeleted{UID: string(d.UID), Generation: d.Generation},
				intent.Stamped(r.Stamp, events.WithCorrelation(string(d.UID), d.Generation))...)
		})
}

// patchStatus applies the field this controller owns, TargetsResolved.
// Not observedGeneration: the rollout runner writes it with the phase of
// the same revision (a phase left from the previous revision must never be
// read as this generation's).
func (r *DeploymentReconciler) patchStatus(ctx context.Context, d *fleetv1.Deployment, rev events.DeploymentRevisionCreated, res targets.Resolution) error {
	return kstatus.ApplyTargetsResolved(ctx, r.Client, "Deployment", d, d.Status.Conditions, rev.Generation, res.Reason, res.Message, FieldOwnerRevisions)
}
