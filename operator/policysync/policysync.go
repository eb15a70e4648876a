// Package policysync owns the operator's pull-secret policy sync: for each
// Deployment, the OpenBao ACL policy that grants its devices read on exactly
// the pull secrets its score references, bound to the JWT roles of its
// device groups, and the PullSecretPolicy condition that says how that
// went. The operator's root (package operator) wires it; the rollouts wait
// for its condition through Ready. It imports no other role.
package policysync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/kstatus"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
	"github.com/nationtech/harmony-fleet/score"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// Admin is what the policy sync needs of OpenBao: an
// *openbao.Client holding an administrator's token.
type Admin interface {
	PutPolicy(ctx context.Context, name, hcl string) error
	Policy(ctx context.Context, name string) (string, error)
	DeletePolicy(ctx context.Context, name string) error
	JWTRoles(ctx context.Context) ([]string, error)
	JWTRolePolicies(ctx context.Context, name string) ([]string, error)
	SetJWTRolePolicies(ctx context.Context, name string, policies []string) error
}

// Defaults of Sync.
const (
	DefaultDevicePrefix    = "fleet/{namespace}"
	DefaultGroupRolePrefix = "fleet-group-{namespace}-"
	DefaultDeviceRole      = "fleet-device-{namespace}"
	// PolicyPrefix starts the name of every policy the operator manages:
	// fleet-deploy.<namespace>.<name>. A namespace has no dot, so the name
	// is unambiguous.
	PolicyPrefix = "fleet-deploy."
	// FieldOwnerPolicies is the field manager of the PullSecretPolicy
	// condition.
	FieldOwnerPolicies = "fleet-operator-policies"
)

// PolicyName is the OpenBao policy of a Deployment.
func PolicyName(namespace, name string) string { return PolicyPrefix + namespace + "." + name }

// Sync keeps, for each Deployment, an OpenBao ACL policy that grants
// read on exactly the pull secrets its score references
// (<kv-mount>/data/<device-prefix>/registry/device-pull/<reference>), and
// binds it to the JWT roles of the Deployment's device groups: role
// <GroupRolePrefix><group> for each allowedGroups entry, or DefaultRole
// when the Deployment has no allowedGroups ("{namespace}" in both is the
// Deployment's namespace: groups are per namespace, and so are roles, so no
// tenant's devices can read another's credentials). Roles are created by
// an administrator (their bindings say which devices are in the group); the
// operator only edits their token policies, touching no policy outside
// PolicyPrefix. While a rollout of the current generation has not
// succeeded, the references of the previous policy stay granted too:
// devices still running the previous revision (non-canaries, or all of
// them after a failed canary) may need to pull it again. Without Admin it
// is disabled and says so in the PullSecretPolicy condition of Deployments
// that reference pull secrets.
type Sync struct {
	Client client.Client
	// Admin is OpenBao with an administrator's token; nil: disabled.
	Admin Admin
	Names
	Log *slog.Logger

	mu sync.Mutex // one sync at a time: role updates read, then write
}

// Names are the OpenBao paths and role names of the policy sync;
// zero values take the defaults.
type Names struct {
	// KVMount is the KV v2 engine's path. Default "secret".
	KVMount string
	// DevicePrefix is the pull secrets' prefix; "{namespace}" is replaced
	// by the Deployment's namespace. Default DefaultDevicePrefix.
	DevicePrefix string
	// GroupRolePrefix names a group's JWT role. Default DefaultGroupRolePrefix.
	GroupRolePrefix string
	// DefaultRole is the role of Deployments without allowedGroups.
	// Default DefaultDeviceRole.
	DefaultRole string
}

// SetupWithManager registers the controller.
func (p *Sync) SetupWithManager(mgr ctrl.Manager) error {
	if p.KVMount == "" {
		p.KVMount = openbao.DefaultKVMount
	}
	if p.DevicePrefix == "" {
		p.DevicePrefix = DefaultDevicePrefix
	}
	if p.GroupRolePrefix == "" {
		p.GroupRolePrefix = DefaultGroupRolePrefix
	}
	if p.DefaultRole == "" {
		p.DefaultRole = DefaultDeviceRole
	}
	if p.Log == nil {
		p.Log = slog.New(slog.DiscardHandler)
	}
	// Spec changes, the start of a deletion, and changes of the status's
	// revision or phase (a success releases the previous revision's
	// references); not every status patch.
	changes := predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*fleetv1.Deployment)
			n, ok2 := e.ObjectNew.(*fleetv1.Deployment)
			return !ok1 || !ok2 || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
				o.Status.Phase != n.Status.Phase || !equality.Semantic.DeepEqual(o.Status.Revision, n.Status.Revision)
		},
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Deployment{}, builder.WithPredicates(changes)).
		Named("fleet-openbao-policy").
		Complete(p)
}

// role expands a role template for namespace.
func role(template, namespace string) string {
	return strings.ReplaceAll(template, "{namespace}", namespace)
}

// managed reports whether a role's token policies are the sync's to edit:
// it is a group role or a default role of some namespace.
func (p *Sync) managed(r string) bool {
	groupStem, _, _ := strings.Cut(p.GroupRolePrefix, "{namespace}")
	if strings.HasPrefix(r, groupStem) {
		return true
	}
	devStem, _, hasNS := strings.Cut(p.DefaultRole, "{namespace}")
	if hasNS {
		return strings.HasPrefix(r, devStem)
	}
	return r == p.DefaultRole
}

// settled reports whether d's current generation rolled out successfully,
// so the previous revision's references are no longer needed.
func settled(d *fleetv1.Deployment) bool {
	r := d.Status.Revision
	return r != nil && r.Generation == d.Generation && r.UID == string(d.UID) && d.Status.Phase == fleetv1.PhaseSucceeded
}

// grantedRefs are the pull-secret references a policy (as PolicyHCL
// writes it) grants.
func grantedRefs(hcl string) []string {
	var out []string
	for _, m := range grantedPath.FindAllStringSubmatch(hcl, -1) {
		out = append(out, m[1])
	}
	return out
}

var grantedPath = regexp.MustCompile(`path "[^"]*/` + regexp.QuoteMeta(openbao.PullSecretFolder) + `/([^"]+)"`)

// PullSecrets returns the distinct pull-secret references of d, sorted.
func PullSecrets(d *fleetv1.Deployment) []string {
	var refs []string
	svcs := d.Spec.Score.Data.Services
	if ic := d.Spec.Score.Data.InitContainer; ic != nil {
		svcs = append([]score.Service{*ic}, svcs...)
	}
	for _, s := range svcs {
		if s.ImagePullSecret != "" {
			refs = append(refs, s.ImagePullSecret)
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
}

// roles are the JWT roles of d's device groups.
func (p *Sync) roles(d *fleetv1.Deployment) []string {
	if len(d.Spec.AllowedGroups) == 0 {
		return []string{role(p.DefaultRole, d.Namespace)}
	}
	out := make([]string, 0, len(d.Spec.AllowedGroups))
	for _, g := range d.Spec.AllowedGroups {
		out = append(out, role(p.GroupRolePrefix, d.Namespace)+g)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// PolicyHCL is the policy of a Deployment in namespace with refs.
func (p *Sync) PolicyHCL(namespace, name string, refs []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Managed by fleet-operator for Deployment %s/%s: its pull secrets, nothing else.\n", namespace, name)
	prefix := strings.ReplaceAll(p.DevicePrefix, "{namespace}", namespace)
	for _, r := range refs {
		fmt.Fprintf(&b, "path %q {\n  capabilities = [\"read\"]\n}\n", p.KVMount+"/data/"+openbao.PullSecretPath(prefix, r))
	}
	return b.String()
}

// Reconcile writes (or deletes) the Deployment's policy, then recomputes
// the token policies of every group role from all Deployments.
func (p *Sync) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d fleetv1.Deployment
	gone := false
	if err := p.Client.Get(ctx, req.NamespacedName, &d); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		gone = true
	}
	gone = gone || !d.DeletionTimestamp.IsZero()
	var refs []string
	if !gone {
		refs = PullSecrets(&d)
	}
	if p.Admin == nil {
		if len(refs) > 0 {
			return ctrl.Result{}, p.condition(ctx, &d, metav1.ConditionFalse, fleetv1.ReasonOpenBaoDisabled,
				"the operator has no OpenBao admin token (--openbao-token-file), so these pull-secret paths are not added to any OpenBao policy: grant them to the devices by hand or configure the token")
		}
		return ctrl.Result{}, nil
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	name := PolicyName(req.Namespace, req.Name)
	current, err := p.Admin.Policy(ctx, name)
	if errors.Is(err, openbao.ErrNotFound) {
		current, err = "", nil
	}
	if err == nil && !gone && !settled(&d) {
		// Until the current generation succeeded, devices may still run
		// the previous revision: keep what it granted.
		refs = append(refs, grantedRefs(current)...)
		slices.Sort(refs)
		refs = slices.Compact(refs)
	}
	switch {
	case err != nil:
	case len(refs) == 0 && current != "":
		if err = p.Admin.DeletePolicy(ctx, name); errors.Is(err, openbao.ErrNotFound) {
			err = nil
		}
	case len(refs) > 0:
		if want := p.PolicyHCL(req.Namespace, req.Name, refs); want != current {
			err = p.Admin.PutPolicy(ctx, name, want)
		}
	}
	var missing []string
	if err == nil {
		missing, err = p.syncRoles(ctx)
	}
	if gone {
		return ctrl.Result{}, err
	}
	switch {
	case err != nil:
		_ = p.condition(ctx, &d, metav1.ConditionFalse, fleetv1.ReasonPolicySyncFailed, err.Error())
		return ctrl.Result{}, err
	case len(PullSecrets(&d)) == 0 && len(refs) == 0:
		return ctrl.Result{}, p.condition(ctx, &d, metav1.ConditionTrue, fleetv1.ReasonNoPullSecrets, "the score references no pull secret")
	}
	var own []string
	for _, r := range p.roles(&d) {
		if slices.Contains(missing, r) {
			own = append(own, r)
		}
	}
	if len(own) > 0 {
		// Retry later: an administrator may create the role.
		return ctrl.Result{RequeueAfter: requeue.RoleMissingWait}, p.condition(ctx, &d, metav1.ConditionFalse, fleetv1.ReasonOpenBaoRoleMissing,
			fmt.Sprintf("OpenBao has no JWT role %s: create it, bound to the devices of the group, and the operator adds policy %s to it", strings.Join(own, ", "), name))
	}
	return ctrl.Result{}, p.condition(ctx, &d, metav1.ConditionTrue, fleetv1.ReasonPolicySynced,
		fmt.Sprintf("policy %s grants read on %d pull secret(s) (%s) to role(s) %s", name, len(refs), strings.Join(refs, ", "), strings.Join(p.roles(&d), ", ")))
}

// syncRoles sets each group role's managed policies to those of the
// Deployments that reference pull secrets and allow the group, keeping
// those of Deployments whose current generation has not succeeded yet;
// policies outside PolicyPrefix are kept. It returns the roles Deployments need
// that do not exist.
func (p *Sync) syncRoles(ctx context.Context) ([]string, error) {
	var list fleetv1.DeploymentList
	if err := p.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	want := map[string][]string{}
	// unsettled are the policies of live Deployments whose current
	// generation has not succeeded yet: a role that carries one keeps it,
	// even if the Deployment left the role's group, because that group's
	// devices may still run (and pull) the previous revision.
	unsettled := map[string]bool{}
	for i := range list.Items {
		d := &list.Items[i]
		if !d.DeletionTimestamp.IsZero() {
			continue
		}
		if !settled(d) {
			unsettled[PolicyName(d.Namespace, d.Name)] = true
		}
		if len(PullSecrets(d)) == 0 {
			// Its policy may still hold the previous revision's
			// references until the current one succeeded.
			if settled(d) {
				continue
			}
			if _, err := p.Admin.Policy(ctx, PolicyName(d.Namespace, d.Name)); errors.Is(err, openbao.ErrNotFound) {
				continue
			} else if err != nil {
				return nil, err
			}
		}
		for _, r := range p.roles(d) {
			want[r] = append(want[r], PolicyName(d.Namespace, d.Name))
		}
	}
	existing, err := p.Admin.JWTRoles(ctx)
	if err != nil {
		return nil, err
	}
	roles := map[string]bool{}
	for _, r := range existing {
		if p.managed(r) {
			roles[r] = true
		}
	}
	var missing []string
	for r := range want {
		if !roles[r] {
			missing = append(missing, r)
		}
	}
	slices.Sort(missing)
	for r := range roles {
		cur, err := p.Admin.JWTRolePolicies(ctx, r)
		if errors.Is(err, openbao.ErrNoRole) {
			continue
		}
		if err != nil {
			return nil, err
		}
		next := slices.DeleteFunc(slices.Clone(cur), func(s string) bool { return strings.HasPrefix(s, PolicyPrefix) && !unsettled[s] })
		next = append(next, want[r]...)
		slices.Sort(next)
		next = slices.Compact(next)
		old := slices.Clone(cur)
		slices.Sort(old)
		if slices.Equal(old, next) {
			continue
		}
		if err := p.Admin.SetJWTRolePolicies(ctx, r, next); err != nil {
			return nil, err
		}
		p.Log.Info("openbao role policies updated", "role", r, "policies", next)
	}
	return missing, nil
}

// condition applies the PullSecretPolicy condition.
func (p *Sync) condition(ctx context.Context, d *fleetv1.Deployment, status metav1.ConditionStatus, reason, msg string) error {
	if cur := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionPullSecretPolicy); cur != nil &&
		cur.Status == status && cur.Reason == reason && cur.Message == msg && cur.ObservedGeneration == d.Generation {
		return nil
	}
	type policyStatus struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	st := policyStatus{Conditions: kstatus.OwnConditions(d.Status.Conditions, metav1.Condition{
		Type: fleetv1.ConditionPullSecretPolicy, Status: status, Reason: reason, Message: msg,
		ObservedGeneration: d.Generation,
	})}
	return kstatus.Apply(ctx, p.Client, "Deployment", d.Namespace, d.Name, &st, FieldOwnerPolicies)
}

// Ready reports whether d's pull-secret policy is written for its
// generation (or there is nothing to write, or a group role is missing —
// waiting would not help; the condition says so).
func Ready(d *fleetv1.Deployment) bool {
	if len(PullSecrets(d)) == 0 {
		return true
	}
	c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionPullSecretPolicy)
	if c == nil || c.ObservedGeneration != d.Generation {
		return false
	}
	return c.Reason == fleetv1.ReasonPolicySynced || c.Reason == fleetv1.ReasonOpenBaoRoleMissing
}
