package operator_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/nationtech/harmony-fleet/events"
	corev1 "k8s.io/api/core/v1"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// pullSecretDeployment creates a Deployment whose init container and
// service reference pull secrets.
func (e *env) pullSecretDeployment(name string, refs []string, groups ...string) {
	e.t.Helper()
	d := &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{
			AllowedGroups:  groups,
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
			Score:          score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{}},
		},
	}
	for i, r := range refs {
		svc := score.Service{Name: "svc" + string(rune('a'+i)), Image: "hub.example:5000/app:v1", ImagePullSecret: r}
		if i == 0 && len(refs) > 1 {
			d.Spec.Score.Data.InitContainer = &svc
			continue
		}
		d.Spec.Score.Data.Services = append(d.Spec.Score.Data.Services, svc)
	}
	if len(d.Spec.Score.Data.Services) == 0 {
		d.Spec.Score.Data.Services = []score.Service{{Name: "plain", Image: "hub.example:5000/app:v1"}}
	}
	if err := e.c.Create(e.ctx, d); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) policyCondition(name string) *metav1.Condition {
	return meta.FindStatusCondition(e.get(name).Status.Conditions, fleetv1.ConditionPullSecretPolicy)
}

func TestPullSecretPoliciesFollowTheDeployments(t *testing.T) {
	e := newEnv(t)
	bao := baostandin.Start(t)
	admin, err := openbao.NewWithToken(openbao.Config{Address: bao.URL()}, bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	labRole, deviceRole := "fleet-group-"+e.ns+"-lab", "fleet-device-"+e.ns
	// An administrator enabled JWT auth and created the roles, bound to
	// the devices of each group; the lab role also carries a policy of its
	// own that the operator must keep.
	if err := errors.Join(
		admin.ConfigureJWT(e.ctx, "http://127.0.0.1:1", ""),
		admin.PutJWTRole(e.ctx, labRole, openbao.JWTRole{BoundAudiences: []string{"harmony-fleet"}, Policies: []string{"app-lab"}}),
		admin.PutJWTRole(e.ctx, deviceRole, openbao.JWTRole{BoundAudiences: []string{"harmony-fleet"}}),
		admin.PutJWTRole(e.ctx, "unrelated", openbao.JWTRole{BoundAudiences: []string{"x"}, Policies: []string{"fleet-deploy.keep.me"}}),
	); err != nil {
		t.Fatal(err)
	}
	// The operator runs with a token holding exactly the policy
	// docs/operator.md documents, not root.
	doc, err := os.ReadFile("../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)The operator's token needs exactly this policy.*?```hcl\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/operator.md documents no policy for the operator's token")
	}
	if err := admin.PutPolicy(e.ctx, "fleet-operator", string(m[1])); err != nil {
		t.Fatal(err)
	}
	opToken, err := admin.CreateToken(e.ctx, []string{"fleet-operator"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if e.openbao, err = openbao.NewWithToken(openbao.Config{Address: bao.URL()}, opToken); err != nil {
		t.Fatal(err)
	}
	e.groups = operator.NewStaticGroups(map[string]map[string][]string{e.ns: {"lab": {"rpi-1"}}})
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.startOperator()
	rolePolicies := func(role string) []string {
		p, err := admin.JWTRolePolicies(e.ctx, role)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(p)
		return p
	}
	policy := func(name string) string {
		p, err := admin.Policy(e.ctx, operator.PolicyName(e.ns, name))
		if errors.Is(err, openbao.ErrNotFound) {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	path := func(ref string) string { return `"secret/data/fleet/` + e.ns + `/registry/device-pull/` + ref + `"` }
	api := operator.PolicyName(e.ns, "api")
	succeed := func(name string, gen int64) {
		e.report("rpi-1", name, e.revisionOf(name, gen), events.WorkloadConverged, "")
		e.waitFor(fmt.Sprintf("generation %d of %s succeeded", gen, name), func() bool {
			d := e.get(name)
			return d.Status.Revision != nil && d.Status.Revision.Generation == gen && d.Status.Phase == fleetv1.PhaseSucceeded
		})
	}

	e.pullSecretDeployment("api", []string{"hub", "hub2"}, "lab")
	e.waitFor("the api policy and the lab role", func() bool {
		c := e.policyCondition("api")
		return c != nil && c.Reason == fleetv1.ReasonPolicySynced && slices.Equal(rolePolicies(labRole), []string{"app-lab", api})
	})
	if p := policy("api"); !strings.Contains(p, path("hub")) || !strings.Contains(p, path("hub2")) || strings.Count(p, "path ") != 2 {
		t.Fatalf("policy:\n%s\nwant exactly the two referenced pull secrets", p)
	}
	succeed("api", 1)

	t.Run("a dropped reference stays granted until the new generation succeeded", func(t *testing.T) {
		// The init container held "hub"; the service keeps "hub2".
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.InitContainer = nil })
		e.revisionOf("api", 2)
		if p := policy("api"); !strings.Contains(p, path("hub")) || !strings.Contains(p, path("hub2")) {
			t.Fatalf("while generation 2 rolls out, the policy lost a reference of generation 1:\n%s", p)
		}
		succeed("api", 2)
		e.waitFor("hub out of the policy", func() bool { return !strings.Contains(policy("api"), path("hub")) })
		if p := policy("api"); !strings.Contains(p, path("hub2")) {
			t.Fatalf("policy lost hub2:\n%s", p)
		}
	})
	t.Run("a group without a role is named in the condition", func(t *testing.T) {
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.AllowedGroups = []string{"lab", "edge"} })
		e.waitFor("the missing role condition", func() bool {
			c := e.policyCondition("api")
			return c != nil && c.Reason == fleetv1.ReasonOpenBaoRoleMissing && strings.Contains(c.Message, "fleet-group-"+e.ns+"-edge") && c.Status == metav1.ConditionFalse
		})
		if !slices.Contains(rolePolicies(labRole), api) {
			t.Error("the lab role lost the policy")
		}
	})
	t.Run("a Deployment without allowedGroups is bound to the namespace's device role", func(t *testing.T) {
		e.pullSecretDeployment("open", []string{"hub"})
		e.waitFor("the device role", func() bool {
			return slices.Equal(rolePolicies(deviceRole), []string{operator.PolicyName(e.ns, "open")})
		})
	})
	t.Run("a Deployment without pull secrets has no policy", func(t *testing.T) {
		e.pullSecretDeployment("plain", nil, "lab")
		e.waitFor("the no-pull-secret condition", func() bool {
			c := e.policyCondition("plain")
			return c != nil && c.Reason == fleetv1.ReasonNoPullSecrets
		})
		if policy("plain") != "" {
			t.Error("a policy was written")
		}
	})
	t.Run("the same group name in another namespace is another role", func(t *testing.T) {
		other := e.ns + "-other"
		if err := e.c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
			t.Fatal(err)
		}
		d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: other}, Spec: fleetv1.DeploymentSpec{
			AllowedGroups: []string{"lab"}, TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{
				{Name: "svc", Image: "hub.example:5000/app:v1", ImagePullSecret: "hub"}}}}}}
		if err := e.c.Create(e.ctx, d); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the other namespace's policy", func() bool {
			_, err := admin.Policy(e.ctx, operator.PolicyName(other, "api"))
			return err == nil
		})
		for _, r := range []string{labRole, deviceRole} {
			if slices.Contains(rolePolicies(r), operator.PolicyName(other, "api")) {
				t.Errorf("role %s of namespace %s got the policy of namespace %s", r, e.ns, other)
			}
		}
	})
	t.Run("moving a Deployment out of a group unbinds it once the new generation succeeded", func(t *testing.T) {
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.AllowedGroups = nil })
		gen := e.get("api").Generation
		e.waitFor("device role with api", func() bool { return slices.Contains(rolePolicies(deviceRole), api) })
		if !slices.Contains(rolePolicies(labRole), api) {
			t.Fatal("the lab role lost the policy while the new generation had not succeeded")
		}
		succeed("api", gen)
		e.waitFor("lab without api", func() bool { return slices.Equal(rolePolicies(labRole), []string{"app-lab"}) })
	})
	t.Run("deletion removes the policy and unbinds it", func(t *testing.T) {
		if err := e.c.Delete(e.ctx, e.get("api")); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the api policy gone", func() bool { return policy("api") == "" && !slices.Contains(rolePolicies(deviceRole), api) })
	})
	if got := rolePolicies("unrelated"); !slices.Equal(got, []string{"fleet-deploy.keep.me"}) {
		t.Errorf("a role outside the group prefix was changed: %v", got)
	}
}

func TestWithoutOpenBaoThePolicySyncSaysItIsDisabled(t *testing.T) {
	e := newEnv(t)
	e.startOperator()
	e.pullSecretDeployment("api", []string{"hub"}, "lab")
	e.waitFor("the disabled condition", func() bool {
		c := e.policyCondition("api")
		return c != nil && c.Reason == fleetv1.ReasonOpenBaoDisabled && c.Status == metav1.ConditionFalse &&
			strings.Contains(c.Message, "--openbao-token-file")
	})
}

// gatedAdmin holds the first PutPolicy until released and records when
// the first policy write completed.
type gatedAdmin struct {
	operator.PolicyAdmin
	called, release chan struct{}
	once            sync.Once

	mu      sync.Mutex
	putDone time.Time
}

func (g *gatedAdmin) PutPolicy(ctx context.Context, name, hcl string) error {
	g.once.Do(func() { close(g.called) })
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	err := g.PolicyAdmin.PutPolicy(ctx, name, hcl)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil && g.putDone.IsZero() {
		g.putDone = time.Now()
	}
	return err
}

func TestNoRevisionIsAppendedBeforeItsPullSecretPolicyIsWritten(t *testing.T) {
	e := newEnv(t)
	bao := baostandin.Start(t)
	admin, err := openbao.NewWithToken(openbao.Config{Address: bao.URL()}, bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(admin.ConfigureJWT(e.ctx, "http://127.0.0.1:1", ""),
		admin.PutJWTRole(e.ctx, "fleet-group-"+e.ns+"-lab", openbao.JWTRole{BoundAudiences: []string{"harmony-fleet"}})); err != nil {
		t.Fatal(err)
	}
	g := &gatedAdmin{PolicyAdmin: admin, called: make(chan struct{}), release: make(chan struct{})}
	e.openbao = g
	waits := &messages{}
	e.logs = waits
	e.groups = operator.NewStaticGroups(map[string]map[string][]string{e.ns: {"lab": {"rpi-1"}}})
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.startOperator()
	e.pullSecretDeployment("api", []string{"hub"}, "lab")
	select {
	case <-g.called:
	case <-e.ctx.Done():
		t.Fatal("the policy sync never wrote a policy")
	}
	// Wait until the Deployment controller has decided: it either holds
	// the revision (and says so) or, wrongly, appended it.
	e.waitFor("the Deployment controller's decision", func() bool {
		return waits.seen("revision waits for the pull-secret policy") || len(e.intent("api")) > 0
	})
	close(g.release)
	e.revisionOf("api", 1)
	recs := e.intent("api")
	g.mu.Lock()
	done := g.putDone
	g.mu.Unlock()
	if done.IsZero() || !recs[0].Stored.After(done) {
		t.Fatalf("the revision was stored at %v, the policy written at %v: the revision must come after", recs[0].Stored, done)
	}
}

// messages is a slog handler that records every message.
type messages struct {
	mu   sync.Mutex
	msgs []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messages) WithGroup(string) slog.Handler            { return m }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.msgs = append(m.msgs, r.Message)
	return nil
}

func (m *messages) seen(msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Contains(m.msgs, msg)
}
