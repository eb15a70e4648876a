package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// admissionOnce prepares the admission tests once per package run.
var admissionOnce struct {
	sync.Once
	err error
}

// installAdmission lets the users alice and bob read and patch
// Deployments; it returns once the API server enforces the admission
// policy of config/admission, which TestMain installs (a write as alice
// naming bob is refused).
func installAdmission(t *testing.T) {
	t.Helper()
	kubeapi.Shared(t)
	admissionOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		admin := as(t, "")
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rollout-requesters"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"fleet.nationtech.io"}, Resources: []string{"deployments"}, Verbs: []string{"get", "create", "update", "patch", "delete"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rollout-requesters"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
				{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"}}}
		for _, o := range []client.Object{role, binding} {
			if err := admin.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				admissionOnce.err = err
				return
			}
		}
		probe := validDeployment("admission-probe")
		if err := admin.Create(ctx, probe); err != nil {
			admissionOnce.err = err
			return
		}
		defer func() { _ = admin.Delete(context.Background(), probe) }()
		alice := as(t, "alice")
		admissionOnce.err = testenv.Poll(ctx, time.Minute, func() bool {
			err := annotate(ctx, alice, probe.Name, action("pause", "bob", "probe"))
			return err != nil && strings.Contains(err.Error(), "fleet-rollout-action-by")
		})
	})
	if admissionOnce.err != nil {
		t.Fatalf("install config/admission: %v", admissionOnce.err)
	}
}

// as returns a client that acts as user (impersonated by the admin), or
// as the admin when user is empty, with the Fleet and RBAC types.
func as(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := kubeapi.Shared(t).RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	s := runtime.NewScheme()
	if err := fleetv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := rbacv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// action is an annotation value as `kubectl annotate` users write it.
func action(kind, by, request string) string {
	return fmt.Sprintf(`{"action":%q,"generation":1,"by":%q,"request":%q}`, kind, by, request)
}

// annotate sets (value non-empty) or removes the rollout-action annotation
// with a merge patch.
func annotate(ctx context.Context, c client.Client, name, value string) error {
	var v any
	if value != "" {
		v = value
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fleetv1.AnnotationRolloutAction: v}}})
	if err != nil {
		return err
	}
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	return c.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch))
}

func TestTheAdmissionPolicyAcceptsARolloutActionOnlyByItsWriter(t *testing.T) {
	installAdmission(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, alice, bob := newClient(t), as(t, "alice"), as(t, "bob")
	d := validDeployment("admission")
	if err := admin.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), d) })

	refused := []string{"fleet-rollout-action-by"}
	steps := []struct {
		name  string
		write func() error
		want  []string // nil: accepted; otherwise every string is in the refusal
	}{
		{"alice annotating a request by alice is accepted", func() error { return annotate(ctx, alice, d.Name, action("pause", "alice", "r1")) }, nil},
		{"alice annotating a request by bob is refused naming the rule and the fix", func() error {
			return annotate(ctx, alice, d.Name, action("resume", "bob", "r2"))
		}, append(refused, `set "by" to "alice"`)},
		{"a request naming by twice is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":"alice","by":"bob","request":"r3"}`)
		}, append(refused, `"by" exactly once`)},
		{"a request with a backslash escape is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":"\u0061lice","request":"r4"}`)
		}, append(refused, "backslash")},
		{"a request whose by is not a string is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":7,"request":"r5"}`)
		}, refused},
		{"an oversize request is refused naming the limit", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"by":"alice","request":"`+strings.Repeat("r", 2000)+`"}`)
		}, append(refused, "longer than 1024")},
		{"a request without by is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"resume","generation":1,"request":"r6"}`)
		}, refused},
		{"bob changing a label leaves alice's request and is accepted", func() error {
			return bob.Patch(ctx, &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: "default"}},
				client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"b"}}}`)))
		}, nil},
		{"bob annotating his own request is accepted", func() error { return annotate(ctx, bob, d.Name, action("resume", "bob", "r7")) }, nil},
		{"alice removing the annotation is accepted", func() error { return annotate(ctx, alice, d.Name, "") }, nil},
		{"alice creating a Deployment with a request by bob is refused", func() error {
			n := validDeployment("admission-created")
			n.Annotations = map[string]string{fleetv1.AnnotationRolloutAction: action("pause", "bob", "r8")}
			err := alice.Create(ctx, n)
			if err == nil {
				_ = admin.Delete(ctx, n)
			}
			return err
		}, append(refused, `set "by" to "alice"`)},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			err := s.write()
			switch {
			case s.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case s.want != nil && err == nil:
				t.Fatal("accepted")
			case s.want != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
				t.Errorf("refused with %v, want an Invalid or Forbidden status", err)
			}
			for _, w := range s.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
		})
	}
	var got fleetv1.Deployment
	if err := admin.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got.Annotations[fleetv1.AnnotationRolloutAction]; ok {
		t.Errorf("the annotation is still there: %v", got.Annotations)
	}
}

// actionAt is an annotation value asking for generation gen.
func actionAt(kind string, gen int64, by, request string) string {
	return fmt.Sprintf(`{"action":%q,"generation":%d,"by":%q,"request":%q}`, kind, gen, by, request)
}

// withSpecChange is a merge patch that sets the Deployment's target
// selector to role (a spec change: metadata.generation moves on) and, when
// value is not empty, the rollout-action annotation, in one write.
func withSpecChange(ctx context.Context, c client.Client, name, role, value string) error {
	meta := map[string]any{}
	if value != "" {
		meta["annotations"] = map[string]any{fleetv1.AnnotationRolloutAction: value}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"targetSelector": map[string]any{"matchLabels": map[string]any{"role": role}}}})
	if err != nil {
		return err
	}
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	return c.Patch(ctx, d, client.RawPatch(types.MergePatchType, patch))
}

func TestTheAdmissionPolicyAcceptsARolloutActionOnlyForTheGenerationItIsWrittenAt(t *testing.T) {
	installAdmission(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, alice, bob := newClient(t), as(t, "alice"), as(t, "bob")
	d := validDeployment("admission-generation")
	if err := admin.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), d) })
	generation := func() int64 {
		t.Helper()
		var got fleetv1.Deployment
		if err := admin.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
			t.Fatal(err)
		}
		return got.Generation
	}
	fix := func(gen int) []string {
		return []string{"fleet-rollout-action-by", `"generation"`, fmt.Sprintf(`set "generation" to %d, the Deployment's metadata.generation`, gen)}
	}

	steps := []struct {
		name  string
		write func() error
		want  []string // nil: accepted; otherwise every string is in the refusal
		gen   int64    // the Deployment's generation after the step
	}{
		{"alice asking ahead for generation 2 while the Deployment is at 1 is refused naming the field and the fix", func() error {
			return annotate(ctx, alice, d.Name, actionAt("pause", 2, "alice", "ahead"))
		}, fix(1), 1},
		{"bob changing the spec moves the Deployment to generation 2", func() error {
			return withSpecChange(ctx, bob, d.Name, "analyzer-2", "")
		}, nil, 2},
		{"alice asking for the generation before is refused", func() error {
			return annotate(ctx, alice, d.Name, actionAt("pause", 1, "alice", "behind"))
		}, fix(2), 2},
		{"alice asking for the Deployment's generation is accepted", func() error {
			return annotate(ctx, alice, d.Name, actionAt("pause", 2, "alice", "now"))
		}, nil, 2},
		{"a write changing the spec and the request together naming the generation before the write is refused", func() error {
			return withSpecChange(ctx, alice, d.Name, "analyzer-3", actionAt("resume", 2, "alice", "before"))
		}, fix(3), 2},
		{"a write changing the spec and the request together naming the generation the write makes is accepted", func() error {
			return withSpecChange(ctx, alice, d.Name, "analyzer-3", actionAt("resume", 3, "alice", "after"))
		}, nil, 3},
		{"a request giving generation twice is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":3,"generation":4,"by":"alice","request":"twice"}`)
		}, append(fix(3), "exactly once"), 3},
		{"a request without generation is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","by":"alice","request":"none"}`)
		}, fix(3), 3},
		{"a request whose generation is a string is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":"3","by":"alice","request":"string"}`)
		}, fix(3), 3},
		{"a request whose generation has a fraction is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":3.0,"by":"alice","request":"fraction"}`)
		}, fix(3), 3},
		{"a request whose generation has an exponent is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":3e0,"by":"alice","request":"exponent"}`)
		}, fix(3), 3},
		{"a request whose generation has a leading zero is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":03,"by":"alice","request":"zero"}`)
		}, fix(3), 3},
		{"a request whose generation is negative is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":-3,"by":"alice","request":"negative"}`)
		}, fix(3), 3},
		{"a request whose generation overflows is refused", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause","generation":99999999999999999999999,"by":"alice","request":"overflow"}`)
		}, fix(3), 3},
		{"a request for generation 3 with spaces around the number is accepted", func() error {
			return annotate(ctx, alice, d.Name, `{"action":"pause", "generation" : 3 , "by":"alice","request":"spaced"}`)
		}, nil, 3},
		{"bob changing the spec leaves alice's request, now for an earlier generation, and is accepted", func() error {
			return withSpecChange(ctx, bob, d.Name, "analyzer-4", "")
		}, nil, 4},
		{"alice creating a Deployment with a request for generation 2 is refused", func() error {
			n := validDeployment("admission-generation-created")
			n.Annotations = map[string]string{fleetv1.AnnotationRolloutAction: actionAt("pause", 2, "alice", "created-ahead")}
			err := alice.Create(ctx, n)
			if err == nil {
				_ = admin.Delete(ctx, n)
			}
			return err
		}, fix(1), 4},
		{"alice creating a Deployment with a request for generation 1 is accepted", func() error {
			n := validDeployment("admission-generation-created")
			n.Annotations = map[string]string{fleetv1.AnnotationRolloutAction: actionAt("pause", 1, "alice", "created")}
			err := alice.Create(ctx, n)
			if err == nil {
				_ = admin.Delete(ctx, n)
			}
			return err
		}, nil, 4},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			err := s.write()
			switch {
			case s.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case s.want != nil && err == nil:
				t.Fatal("accepted")
			case s.want != nil && !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err):
				t.Errorf("refused with %v, want an Invalid or Forbidden status", err)
			}
			for _, w := range s.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not say %q", err, w)
				}
			}
			if got := generation(); got != s.gen {
				t.Errorf("the Deployment is at generation %d, want %d", got, s.gen)
			}
		})
	}
	var got fleetv1.Deployment
	if err := admin.Get(ctx, client.ObjectKeyFromObject(d), &got); err != nil {
		t.Fatal(err)
	}
	a, err := fleetv1.ParseRolloutAction(got.Annotations[fleetv1.AnnotationRolloutAction])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fleetv1.RolloutAction{Action: fleetv1.RolloutActionPause, Generation: 3, By: "alice", Request: "spaced"}, a); diff != "" {
		t.Errorf("the request left on the Deployment (-want +got):\n%s", diff)
	}
}

// hostileAction builds an annotation value from the fields of a request
// by alice for generation gen, bent by rng the ways a writer fooling the
// policy's regular expressions might: other JSON types and spellings of
// generation and by, repeated, missing, re-cased and unknown keys, a key's
// name inside a string, nested objects, whitespace, trailing text. Most
// are not valid requests; the policy must accept none whose strict parse
// gives another generation or user.
func hostileAction(rng *rand.Rand, gen int64) string {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	g := fmt.Sprint(gen)
	fields := [][2]string{{`"action"`, `"pause"`}, {`"generation"`, g}, {`"by"`, `"alice"`}, {`"request"`, `"r1"`}}
	rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	for range rng.IntN(4) {
		i := rng.IntN(len(fields))
		switch rng.IntN(8) {
		case 0: // another value for generation
			fields[i] = [2]string{`"generation"`, pick(fmt.Sprint(gen+1), fmt.Sprint(gen-1), `"`+g+`"`, g+".0", "0"+g, "-"+g, g+"e0",
				"true", "null", "["+g+"]", `{"generation":`+g+`}`, "1"+g, g+"0")}
		case 1: // another value for by
			fields[i] = [2]string{`"by"`, pick(`"bob"`, `"alice "`, `"Alice"`, `7`, `["alice"]`, `""`)}
		case 2: // a field repeated
			fields = append(fields, fields[rng.IntN(len(fields))])
		case 3: // a field dropped
			fields = append(fields[:i], fields[i+1:]...)
			if len(fields) == 0 {
				fields = [][2]string{{`"action"`, `"pause"`}}
			}
		case 4: // a key re-cased or padded
			fields[i][0] = pick(`"Generation"`, `"generation "`, `"GENERATION"`, `"By"`, `"by "`)
		case 5: // the key's name inside a string
			fields[i][1] = pick(`"generation"`, `"generation:`+g+`"`, `"by"`, `"generation\":`+g+`"`)
		case 6: // an unknown or nested field
			fields = append(fields, [2]string{pick(`"x"`, `"batch"`), pick(`{"generation":`+g+`,"by":"alice"}`, `1`, `"generation"`)})
		case 7: // another user and generation for a second request
			fields = append(fields, [2]string{`"generation"`, fmt.Sprint(gen + 1)}, [2]string{`"by"`, `"bob"`})
		}
	}
	ws := func() string { return pick("", "", " ", "\n", "\t ") }
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f[0] + ws() + ":" + ws() + f[1]
	}
	return ws() + "{" + ws() + strings.Join(parts, ws()+","+ws()) + ws() + "}" + pick("", "", " ", `{"generation":`+g+`}`, `,"generation":`+g, "}")
}

// TestTheAdmissionPolicyAcceptsNoGeneratedRequestTheOperatorReadsOtherwise
// writes generated hostile requests as alice (server-side dry runs: a
// create, so generation 1, and an update of a Deployment at generation 2)
// and checks the policy against the operator's strict parser: every value
// the policy accepts either does not parse (the operator answers it with
// a Warning) or is a request by alice for the generation the write leaves.
func TestTheAdmissionPolicyAcceptsNoGeneratedRequestTheOperatorReadsOtherwise(t *testing.T) {
	installAdmission(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, alice := newClient(t), as(t, "alice")
	d := validDeployment("admission-generated")
	if err := admin.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), d) })
	if err := withSpecChange(ctx, admin, d.Name, "analyzer-2", ""); err != nil {
		t.Fatal(err)
	}

	writes := []struct {
		name  string
		gen   int64 // the generation the write leaves
		write func(value string) error
	}{
		{"a create", 1, func(value string) error {
			n := validDeployment("admission-generated-created")
			n.Annotations = map[string]string{fleetv1.AnnotationRolloutAction: value}
			return alice.Create(ctx, n, client.DryRunAll)
		}},
		{"an update of a Deployment at generation 2", 2, func(value string) error {
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{fleetv1.AnnotationRolloutAction: value}}})
			if err != nil {
				return err
			}
			return alice.Patch(ctx, &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: d.Name, Namespace: "default"}},
				client.RawPatch(types.MergePatchType, patch), client.DryRunAll)
		}},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(31, 2))
			var accepted, valid, refused int
			for i := range 150 {
				value := hostileAction(rng, w.gen)
				if i == 0 {
					value = actionAt("pause", w.gen, "alice", "r1") // the honest request
				}
				err := w.write(value)
				if err != nil {
					if !strings.Contains(err.Error(), "fleet-rollout-action-by") {
						t.Fatalf("%q refused by something else than the policy: %v", value, err)
					}
					refused++
					continue
				}
				accepted++
				a, perr := fleetv1.ParseRolloutAction(value)
				if perr != nil {
					continue // the operator warns and records nothing
				}
				valid++
				if a.Generation != w.gen || a.By != "alice" {
					t.Errorf("the policy accepted %q, which the operator reads as a request by %q for generation %d (want alice, %d)",
						value, a.By, a.Generation, w.gen)
				}
			}
			if valid == 0 || refused == 0 {
				t.Errorf("%d accepted (%d valid), %d refused: the generator no longer tries both sides", accepted, valid, refused)
			}
			t.Logf("%d accepted (%d valid requests), %d refused", accepted, valid, refused)
		})
	}
}
