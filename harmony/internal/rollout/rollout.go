// Package rollout applies harmony's Fleet Deployment and waits for its
// rollout: a server-side apply with field manager "harmony" returns the
// object's UID and generation, and Wait follows the Deployment status until
// the revision with exactly that UID and generation succeeds or fails.
//
// Invariants: the applied object is a pure function of its input (no time,
// no random value), so an identical apply leaves the generation unchanged;
// Wait never takes the status of another revision for its own: an older
// generation's success does not complete it, a newer generation or a
// recreated object ends it with ErrSuperseded. Only package harmony imports
// it.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/dynamic"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of every apply.
const FieldManager = "harmony"

// Resource is the Fleet Deployment resource.
var Resource = schema.GroupVersionResource{Group: fleetv1.GroupVersion.Group, Version: fleetv1.GroupVersion.Version, Resource: "deployments"}

// ErrApply means the API server refused or failed the apply.
var ErrApply = errors.New("rollout: apply failed")

// ErrSuperseded means the Deployment moved past the applied revision (a
// newer generation was applied, or the object was deleted or recreated)
// before that revision finished: its outcome will never be reported.
var ErrSuperseded = errors.New("rollout: the applied revision was superseded")

// ErrNoTargets means the operator resolved no target for the applied
// revision; the error carries the TargetsResolved condition's reason and
// message.
var ErrNoTargets = errors.New("rollout: the revision has no targets")

// ErrProgressDeadlineExceeded means the applied revision's rollout made no
// progress within its progress deadline: the operator set its Progressing
// condition False with reason ProgressDeadlineExceeded. The rollout goes
// on (the deadline decides nothing); the wait stops, so that a typo'd image
// is reported in minutes, not at the wait's timeout.
var ErrProgressDeadlineExceeded = errors.New("rollout: no progress within the progress deadline")

// Applied identifies the revision an apply made.
type Applied struct {
	// Namespace and Name of the Deployment.
	Namespace string
	Name      string
	// UID and Generation the apply returned: the revision to wait for.
	UID        string
	Generation int64
}

// Apply server-side applies d (its TypeMeta, name, namespace, labels,
// annotations and spec; never status) with field manager FieldManager,
// forcing ownership of conflicting fields, and returns the revision.
func Apply(ctx context.Context, client dynamic.Interface, d *fleetv1.Deployment) (Applied, error) {
	obj, err := applyObject(d)
	if err != nil {
		return Applied{}, err
	}
	got, err := client.Resource(Resource).Namespace(d.Namespace).Apply(ctx, d.Name, obj,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return Applied{}, fmt.Errorf("%w: Deployment %s/%s: %w", ErrApply, d.Namespace, d.Name, err)
	}
	return Applied{Namespace: got.GetNamespace(), Name: got.GetName(), UID: string(got.GetUID()), Generation: got.GetGeneration()}, nil
}

// applyObject is the apply configuration of d: only the fields harmony
// owns, so defaults and status stay with their owners.
func applyObject(d *fleetv1.Deployment) (*unstructured.Unstructured, error) {
	type meta struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	b, err := json.Marshal(struct {
		APIVersion string                 `json:"apiVersion"`
		Kind       string                 `json:"kind"`
		Metadata   meta                   `json:"metadata"`
		Spec       fleetv1.DeploymentSpec `json:"spec"`
	}{
		APIVersion: fleetv1.GroupVersion.String(), Kind: "Deployment",
		Metadata: meta{Name: d.Name, Namespace: d.Namespace, Labels: d.Labels, Annotations: d.Annotations},
		Spec:     d.Spec,
	})
	if err != nil {
		return nil, fmt.Errorf("rollout: encode Deployment: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("rollout: encode Deployment: %w", err)
	}
	return obj, nil
}

// FailedError is a revision that failed: a target (or a canary) reported a
// failure.
type FailedError struct {
	// Applied is the revision that failed.
	Applied Applied
	// Status is its status: counts and the latest device failure.
	Status fleetv1.DeploymentStatus
}

// Error gives the counts and the latest device error.
func (e *FailedError) Error() string {
	return fmt.Sprintf("rollout of %s/%s generation %d failed: %s", e.Applied.Namespace, e.Applied.Name, e.Applied.Generation, Summary(e.Status))
}

// StalledError is a revision whose rollout made no progress within its
// progress deadline; it wraps ErrProgressDeadlineExceeded.
type StalledError struct {
	// Applied is the revision waited for.
	Applied Applied
	// Status is its status: counts and conditions.
	Status fleetv1.DeploymentStatus
	// Message is the Progressing condition's message: the waiting devices
	// and their last report.
	Message string
}

// Error gives the counts and the waiting devices with their last report.
func (e *StalledError) Error() string {
	return fmt.Sprintf("rollout of %s/%s generation %d made no progress within its progress deadline (the rollout goes on; the wait stops): %s; %s",
		e.Applied.Namespace, e.Applied.Name, e.Applied.Generation, Summary(e.Status), e.Message)
}

// Unwrap returns ErrProgressDeadlineExceeded.
func (e *StalledError) Unwrap() error { return ErrProgressDeadlineExceeded }

// TimeoutError is a wait that ended before the revision finished.
type TimeoutError struct {
	// Applied is the revision waited for.
	Applied Applied
	// Status is the last status of the revision seen (zero when the
	// operator never reported it).
	Status fleetv1.DeploymentStatus
	// PullSecretPolicy, when set, is the last PullSecretPolicy condition
	// seen that was False for the applied generation: why the operator
	// holds the revision (or why devices may not read the pull secret).
	PullSecretPolicy *metav1.Condition
	// ReadErr, when set, is the error of the last status read, when it
	// failed (reads are retried until the deadline).
	ReadErr error
	// Err is the context's error.
	Err error
}

// Error gives the last status seen, the pull-secret policy problem and
// the last failed read, if any.
func (e *TimeoutError) Error() string {
	out := fmt.Sprintf("gave up waiting for %s/%s generation %d: ", e.Applied.Namespace, e.Applied.Name, e.Applied.Generation)
	if e.Status.Revision == nil {
		out += "the operator has not reported this revision yet"
	} else {
		out += Summary(e.Status)
	}
	if c := e.PullSecretPolicy; c != nil {
		out += "; " + PolicySummary(*c)
	}
	if e.ReadErr != nil {
		out += fmt.Sprintf("; the last status read failed: %v", e.ReadErr)
	}
	return fmt.Sprintf("%s: %v", out, e.Err)
}

// PolicySummary is one line of a PullSecretPolicy condition that is False:
// its reason and message, and what the operator does meanwhile.
func PolicySummary(c metav1.Condition) string {
	what := "the operator holds the revision until it is written"
	if c.Reason == fleetv1.ReasonOpenBaoRoleMissing {
		what = "devices of that group cannot read the pull secret"
	}
	return fmt.Sprintf("OpenBao pull-secret policy not written (%s: %s): %s", c.Reason, c.Message, what)
}

// Unwrap returns the context's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// Summary is one line of a revision's status: phase, counts, canary stage
// and the latest device error.
func Summary(s fleetv1.DeploymentStatus) string {
	c := s.Counts
	out := fmt.Sprintf("%s: %d succeeded, %d pending, %d failed of %d", s.Phase, c.Succeeded, c.Pending, c.Failed, c.Total)
	if c.Canaries > 0 {
		out += fmt.Sprintf("; canaries %d/%d converged, %d failed", c.CanariesSucceeded, c.Canaries, c.CanariesFailed)
	}
	if f := s.LatestFailure; f != nil {
		out += fmt.Sprintf("; latest error from device %s: %s", f.Device, f.Error)
	}
	return out
}

// CanaryStage describes the canary stage of a revision from its final
// status: "" when the revision froze no canary, otherwise how many canaries
// converged before the release to the other targets. It reads the counts the
// operator keeps in the status for the whole life of the revision, so it does
// not depend on having seen the Canary phase while it lasted (a canary stage
// can pass between two status reads).
func CanaryStage(s fleetv1.DeploymentStatus) string {
	c := s.Counts
	if c.Canaries == 0 {
		return ""
	}
	return fmt.Sprintf(" (canary stage: %d of %d canaries converged before the release)", c.CanariesSucceeded, c.Canaries)
}

// WaitOptions configure Wait.
type WaitOptions struct {
	// Interval between two reads of the status. Default 1s.
	Interval time.Duration
	// Progress, when set, is called with the revision's status each time it
	// changes.
	Progress func(fleetv1.DeploymentStatus)
	// PullSecretPolicy, when set, is called each time the PullSecretPolicy
	// condition of the applied generation turns False or changes while
	// False (see PolicySummary): the operator holds the revision until its
	// OpenBao policy is written.
	PullSecretPolicy func(metav1.Condition)
	// Logger, when set, receives an info line for each status read that
	// failed transiently and is retried. Default: nothing is logged.
	Logger *slog.Logger
}

// Wait reads the Deployment's status until the revision a describes
// succeeds (nil), fails (*FailedError), is superseded (ErrSuperseded), has
// no targets (ErrNoTargets), makes no progress within its progress deadline
// (*StalledError) or ctx ends (*TimeoutError). It returns the last status
// of that revision.
//
// A read that fails transiently (the API server is overloaded, restarting
// or unreachable for a moment; see transient) is retried at the next
// interval until ctx ends; any other failed read ends the wait with its
// error.
func Wait(ctx context.Context, client dynamic.Interface, a Applied, o WaitOptions) (fleetv1.DeploymentStatus, error) {
	interval := o.Interval
	if interval <= 0 {
		interval = time.Second
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var (
		last       fleetv1.DeploymentStatus
		lastJSON   string
		policy     *metav1.Condition
		policyJSON string
		readErr    error
	)
	timeout := func() error {
		return &TimeoutError{Applied: a, Status: last, PullSecretPolicy: policy, ReadErr: readErr, Err: ctx.Err()}
	}
	for {
		select {
		case <-ctx.Done():
			return last, timeout()
		case <-timer.C:
		}
		next := interval
		d, err := get(ctx, client, a)
		switch {
		case err != nil && (ctx.Err() != nil || pastDeadline(err)):
			return last, timeout()
		case err != nil && transient(err):
			readErr = err
			if delay, ok := apierrors.SuggestsClientDelay(err); ok && time.Duration(delay)*time.Second > next {
				next = time.Duration(delay) * time.Second
			}
			if o.Logger != nil {
				o.Logger.InfoContext(ctx, "rollout status read failed, retrying", "deployment", a.Namespace+"/"+a.Name, "err", err, "retry_in", next)
			}
			timer.Reset(next)
			continue
		case err != nil:
			return last, err
		}
		readErr = nil
		if c := heldBy(a, d); c != nil {
			policy = c
			if b, _ := json.Marshal(c); string(b) != policyJSON {
				policyJSON = string(b)
				if o.PullSecretPolicy != nil {
					o.PullSecretPolicy(*c)
				}
			}
		} else {
			policy, policyJSON = nil, ""
		}
		st, done, err := judge(a, d)
		if st.Revision != nil {
			last = st
			if b, _ := json.Marshal(st); string(b) != lastJSON && o.Progress != nil {
				lastJSON = string(b)
				o.Progress(st)
			}
		}
		if done {
			return last, err
		}
		timer.Reset(next)
	}
}

// transient reports whether a failed status read may succeed when repeated:
// the API server was overloaded (429), unavailable (503), timed out, failed
// internally (500), or the connection broke (a network error, a reset, an
// unexpected EOF).
func transient(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, errDecode), errors.Is(err, ErrSuperseded):
		return false
	case apierrors.IsServerTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsTimeout(err), apierrors.IsInternalError(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), utilnet.IsProbableEOF(err),
		utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err):
		return true
	case errors.As(err, &netErr):
		return true
	}
	return false
}

// pastDeadline reports client-go's rate limiter refusing to wait because
// the wait would end after the context's deadline
// (golang.org/x/time/rate: "rate: Wait(n=1) would exceed context
// deadline"): the wait's own timeout, reached a moment early. The limiter's
// error wraps nothing, so its text is all there is.
func pastDeadline(err error) bool {
	return strings.Contains(err.Error(), "would exceed context deadline")
}

// errDecode marks a Deployment that could not be decoded: never retried.
var errDecode = errors.New("rollout: decode Deployment")

func get(ctx context.Context, client dynamic.Interface, a Applied) (*fleetv1.Deployment, error) {
	u, err := client.Resource(Resource).Namespace(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Deployment %s/%s was deleted", ErrSuperseded, a.Namespace, a.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("rollout: read Deployment %s/%s: %w", a.Namespace, a.Name, err)
	}
	var d fleetv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		return nil, fmt.Errorf("%w %s/%s: %v", errDecode, a.Namespace, a.Name, err)
	}
	return &d, nil
}

// heldBy is the PullSecretPolicy condition of d when it is False for the
// applied generation (PolicySyncFailed, OpenBaoDisabled,
// OpenBaoRoleMissing), else nil. Before the operator holds a's revision
// it reports why here.
func heldBy(a Applied, d *fleetv1.Deployment) *metav1.Condition {
	if string(d.UID) != a.UID {
		return nil
	}
	c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionPullSecretPolicy)
	if c == nil || c.ObservedGeneration != a.Generation || c.Status != metav1.ConditionFalse {
		return nil
	}
	out := *c
	out.LastTransitionTime = metav1.Time{}
	return &out
}

// judge decides from one read of the Deployment: the status of a's revision
// (zero when the status describes another one), whether waiting is over,
// and the outcome.
func judge(a Applied, d *fleetv1.Deployment) (fleetv1.DeploymentStatus, bool, error) {
	if string(d.UID) != a.UID {
		return fleetv1.DeploymentStatus{}, true, fmt.Errorf("%w: Deployment %s/%s was deleted and recreated (uid %s, applied %s)", ErrSuperseded, a.Namespace, a.Name, d.UID, a.UID)
	}
	if d.Generation > a.Generation {
		return fleetv1.DeploymentStatus{}, true, fmt.Errorf("%w: Deployment %s/%s is at generation %d, applied %d: another apply replaced this revision", ErrSuperseded, a.Namespace, a.Name, d.Generation, a.Generation)
	}
	st := d.Status
	if st.ObservedGeneration == a.Generation {
		if c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionTargetsResolved); c != nil &&
			c.ObservedGeneration == a.Generation && c.Status == metav1.ConditionFalse {
			return fleetv1.DeploymentStatus{}, true, fmt.Errorf("%w: %s: %s", ErrNoTargets, c.Reason, c.Message)
		}
	}
	if r := st.Revision; r == nil || r.UID != a.UID || r.Generation != a.Generation {
		return fleetv1.DeploymentStatus{}, false, nil
	}
	switch st.Phase {
	case fleetv1.PhaseSucceeded:
		if st.Counts.Total == 0 {
			return st, true, fmt.Errorf("%w: the revision succeeded with no target", ErrNoTargets)
		}
		return st, true, nil
	case fleetv1.PhaseFailed:
		return st, true, &FailedError{Applied: a, Status: st}
	}
	if c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionProgressing); c != nil && c.ObservedGeneration == a.Generation &&
		c.Status == metav1.ConditionFalse && c.Reason == fleetv1.ReasonProgressDeadlineExceeded {
		return st, true, &StalledError{Applied: a, Status: st, Message: c.Message}
	}
	return st, false, nil
}
