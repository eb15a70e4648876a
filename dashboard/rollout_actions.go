package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/oklog/ulid/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// ErrRefusedByKubernetes wraps the API server's refusal of a write made as
// the signed-in user (RBAC or the admission policy): the API server, not
// the dashboard, decided. errors.As to *apierrors.StatusError gives its
// answer.
var ErrRefusedByKubernetes = errors.New("the Kubernetes API server refused the request")

// ErrNoKubeUser: the signed-in user's id_token gave no Kubernetes user name
// (KubeIdentity's claim is missing), so the dashboard cannot write as them.
var ErrNoKubeUser = errors.New("no Kubernetes user name for this user")

// errNoBatchWaits: an approval without a batch while the Deployment's
// status names none waiting.
var errNoBatchWaits = fmt.Errorf("%w: no batch of the current generation waits for approval (status.plan.awaitingApproval is not set)", ErrInvalidInput)

// RequestRollout implements Actions: as the user (Kubernetes impersonation
// of u.KubeUser with u.KubeGroups), it reads the Deployment and writes the
// rollout-action annotation for its current generation with a new request
// id, conditional on the resource version read (a conflict is read again).
// batch 0 approves the batch the status says waits. The operator records
// the request as rollout.approved, .paused or .resumed naming "by".
func (a *FleetActions) RequestRollout(ctx context.Context, namespace, name string, action fleetv1.RolloutActionKind, batch int, u User) (fleetv1.RolloutAction, error) {
	ra := fleetv1.RolloutAction{Action: action, Batch: batch, By: u.KubeUser, Request: ulid.Make().String()}
	if a.impersonate == nil {
		return ra, fmt.Errorf("%w: the dashboard has no Kubernetes configuration to impersonate users with", ErrNotImplemented)
	}
	if u.KubeUser == "" {
		return ra, ErrNoKubeUser
	}
	c, err := a.asUser(u)
	if err != nil {
		return ra, err
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d fleetv1.Deployment
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &d); err != nil {
			return err
		}
		ra.Generation, ra.Batch = d.Generation, batch
		if action == fleetv1.RolloutActionApprove && batch == 0 {
			if d.Status.ObservedGeneration != d.Generation || d.Status.Plan == nil || d.Status.Plan.AwaitingApproval == 0 {
				return errNoBatchWaits
			}
			ra.Batch = int(d.Status.Plan.AwaitingApproval)
		}
		value, err := ra.Encode()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
		orig := d.DeepCopy()
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[fleetv1.AnnotationRolloutAction] = value
		return c.Patch(ctx, &d, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager))
	})
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		return ra, fmt.Errorf("%w: no Deployment %s/%s", ErrNotFound, namespace, name)
	case apierrors.IsForbidden(err), apierrors.IsInvalid(err), apierrors.IsUnauthorized(err):
		return ra, fmt.Errorf("%w: %w", ErrRefusedByKubernetes, err)
	default:
		return ra, fmt.Errorf("rollout %s of Deployment %s/%s as %s: %w", action, namespace, name, u.KubeUser, err)
	}
	a.log.Info("rollout "+string(action)+" requested", "namespace", namespace, "deployment", name, "generation", ra.Generation, "batch", ra.Batch,
		"user", u.Name, "user_subject", u.Subject, "kube_user", u.KubeUser, "request", ra.Request)
	return ra, nil
}

// asUser returns a client of the API server that impersonates u: the
// dashboard's own credentials, with Impersonate-User and Impersonate-Group
// headers (the API server adds system:authenticated).
func (a *FleetActions) asUser(u User) (client.Client, error) {
	cfg := rest.CopyConfig(a.impersonate)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: u.KubeUser, Groups: u.KubeGroups}
	c, err := client.New(cfg, client.Options{Scheme: a.kube.Scheme(), Mapper: a.kube.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("a Kubernetes client impersonating %s: %w", u.KubeUser, err)
	}
	return c, nil
}

// handleRolloutAction is a pause, resume or approve from the Deployment
// page: CSRF-checked, then written as the user; the API server decides
// (ADR 0022). Its refusal is shown with its own message.
func (s *Server) handleRolloutAction(w http.ResponseWriter, r *http.Request) {
	sess, _ := s.session(r)
	if !s.checkCSRF(w, r, sess) {
		return
	}
	ns, name := r.PathValue("ns"), r.PathValue("name")
	action := fleetv1.RolloutActionKind(r.PostFormValue("action"))
	switch action {
	case fleetv1.RolloutActionPause, fleetv1.RolloutActionResume, fleetv1.RolloutActionApprove:
	default:
		s.errorPage(w, r, http.StatusBadRequest, "Invalid request", "action must be pause, resume or approve.")
		return
	}
	batch := 0
	if v := r.PostFormValue("batch"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || action != fleetv1.RolloutActionApprove {
			s.errorPage(w, r, http.StatusBadRequest, "Invalid request", "batch is only for approve and must be a whole number, 1 or more.")
			return
		}
		batch = n
	}
	ra, err := s.o.Actions.RequestRollout(r.Context(), ns, name, action, batch, sess.User)
	var status *apierrors.StatusError
	switch {
	case err == nil:
	case errors.Is(err, ErrRefusedByKubernetes):
		msg := err.Error()
		if errors.As(err, &status) {
			msg = status.ErrStatus.Message
		}
		s.log.Info("rollout request refused by the Kubernetes API server", "user", sess.User.Name, "kube_user", sess.User.KubeUser,
			"namespace", ns, "deployment", name, "action", string(action), "err", err)
		s.errorPage(w, r, http.StatusForbidden, "Refused by Kubernetes",
			"The Kubernetes API server refused this request, made as "+bounded(sess.User.KubeUser, 128)+": "+bounded(msg, 512))
		return
	case errors.Is(err, ErrNoKubeUser):
		s.errorPage(w, r, http.StatusForbidden, "No Kubernetes user",
			"Your sign-in carries no Kubernetes user name (the id_token lacks the username claim the dashboard is configured with), so the dashboard cannot act as you.")
		return
	case errors.Is(err, ErrNotFound):
		s.errorPage(w, r, http.StatusNotFound, "Deployment not found", "There is no such Deployment resource.")
		return
	default:
		s.actionError(w, r, err)
		return
	}
	v := url.Values{"done": {string(action)}}
	if ra.Batch > 0 {
		v.Set("batch", strconv.Itoa(ra.Batch))
	}
	http.Redirect(w, r, "/deployments/"+url.PathEscape(ns)+"/"+url.PathEscape(name)+"?"+v.Encode(), http.StatusSeeOther)
}

// rolloutNotice is the Deployment page's confirmation after a request.
func rolloutNotice(q url.Values) string {
	batch, _ := strconv.Atoi(q.Get("batch"))
	switch fleetv1.RolloutActionKind(q.Get("done")) {
	case fleetv1.RolloutActionApprove:
		if batch > 0 {
			return fmt.Sprintf("Approval of batch %d requested: the operator records it as rollout.approved, naming you.", batch)
		}
	case fleetv1.RolloutActionPause:
		return "Pause requested: the operator records it as rollout.paused, naming you; no new batch starts."
	case fleetv1.RolloutActionResume:
		return "Resume requested: the operator records it as rollout.resumed, naming you."
	}
	return ""
}
