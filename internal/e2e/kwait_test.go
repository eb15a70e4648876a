package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// kobj is an object as kubectl get -o json prints it.
type kobj map[string]any

// field is the value at path (e.g. "status", "phase") as kubectl's
// jsonpath prints it: a string as is, a number or bool in JSON, "" when
// absent.
func (o kobj) field(path ...string) string {
	var v any = map[string]any(o)
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		if v, ok = m[p]; !ok {
			return ""
		}
	}
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

// fieldIs holds when the value at path is want (kubectl wait
// --for=jsonpath=…=want).
func fieldIs(want string, path ...string) func(kobj) error {
	return func(o kobj) error {
		if got := o.field(path...); got != want {
			return fmt.Errorf(".%s is %q, want %q", strings.Join(path, "."), got, want)
		}
		return nil
	}
}

// conditionIs holds when the object's condition typ has status and was
// written for its current generation (kubectl wait
// --for=condition=typ=status: a condition of an older generation does not
// count).
func conditionIs(typ, status string) func(kobj) error {
	return func(o kobj) error {
		gen := o.field("metadata", "generation")
		st, _ := o["status"].(map[string]any)
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			c, _ := c.(map[string]any)
			if c["type"] != typ {
				continue
			}
			cond := kobj(c)
			observed := cond.field("observedGeneration")
			if observed == "" {
				observed = o.field("status", "observedGeneration")
			}
			if observed != "" && observed != gen {
				return fmt.Errorf("condition %s is of generation %s, the object's is %s", typ, observed, gen)
			}
			if cond.field("status") != status {
				return fmt.Errorf("condition %s is %s (%s: %s), want %s", typ, cond.field("status"), cond.field("reason"), cond.field("message"), status)
			}
			return nil
		}
		return fmt.Errorf("no condition %s", typ)
	}
}

// waitMargin is kept of the test's deadline for the report of a wait
// that timed out and the test's cleanup.
const waitMargin = 15 * time.Second

// kubectlEvery is the shortest time between two kubectl gets of a wait.
const kubectlEvery = 500 * time.Millisecond

// waitObject polls obj (e.g. "fdeploy/web") in namespace ns with kubectl
// get -o json until check holds, for as long as the test may run (ctx's
// deadline, or go test's, less waitMargin): no fixed kubectl wait
// timeout that a loaded machine outlasts. If it does not hold, the test
// fails with what check said last and the object's generation and status
// (phase, conditions, counts): the failure explains itself.
func waitObject(t *testing.T, ctx context.Context, srv *kubeapi.Server, ns, obj, what string, check func(kobj) error) {
	t.Helper()
	timeout := 10 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if dl, ok := t.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	timeout = max(timeout-waitMargin, time.Second)
	get := func(ctx context.Context) (kobj, error) {
		out, err := srv.Kubectl(ctx, nil, "get", obj, "-n", ns, "-o", "json")
		if err != nil {
			return nil, fmt.Errorf("kubectl get %s: %w: %s", obj, err, out)
		}
		var o kobj
		if err := json.Unmarshal(out, &o); err != nil {
			return nil, fmt.Errorf("kubectl get %s: %w", obj, err)
		}
		return o, nil
	}
	start := time.Now()
	// Poll's back-off is for cheap checks; each kubectl is a process of
	// its own, so it runs at most every kubectlEvery (a loaded machine
	// has two cores for everyone).
	var last time.Time
	lastErr := errors.New("not read yet")
	err := testenv.PollErr(ctx, timeout, func() error {
		if time.Since(last) < kubectlEvery {
			return lastErr
		}
		last = time.Now()
		o, err := get(ctx)
		if err != nil {
			lastErr = err
		} else {
			lastErr = check(o)
		}
		return lastErr
	})
	if err == nil {
		return
	}
	// The object as it is now, read with a context of its own: ctx may
	// be what ended.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	state := "unreadable"
	if o, gerr := get(rctx); gerr != nil {
		state += ": " + gerr.Error()
	} else {
		status, _ := json.MarshalIndent(o["status"], "  ", "  ")
		state = fmt.Sprintf("generation %s, status:\n  %s", o.field("metadata", "generation"), status)
	}
	t.Fatalf("%s in %s did not %s within %s: %v\nits %s", obj, ns, what, time.Since(start).Round(time.Second), err, state)
}

// TestTheWaitChecksReadTheObjectAsKubectlWaitDoes: a condition counts
// only for the object's current generation, a field is compared as
// kubectl's jsonpath prints it, and what is missing is said.
func TestTheWaitChecksReadTheObjectAsKubectlWaitDoes(t *testing.T) {
	const obj = `{"metadata": {"generation": 2, "labels": {"role": "e2e"}},
		"status": {"phase": "Progressing", "observedGeneration": 2, "plan": {"awaitingApproval": 1},
		"conditions": [{"type": "Ready", "status": "True", "reason": "Converged", "observedGeneration": 1},
			{"type": "Progressing", "status": "True", "reason": "Rolling"},
			{"type": "Degraded", "status": "False", "observedGeneration": 2}]}}`
	var o kobj
	if err := json.Unmarshal([]byte(obj), &o); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		check func(kobj) error
		want  string // "" holds; otherwise a part of the error
	}{
		{"a condition of the current generation holds", conditionIs("Degraded", "False"), ""},
		{"a condition of an older generation does not", conditionIs("Ready", "True"), "of generation 1, the object's is 2"},
		{"a condition without its own generation takes the status's", conditionIs("Progressing", "True"), ""},
		{"a condition with another status does not hold and says why", conditionIs("Progressing", "False"), "is True (Rolling: ), want False"},
		{"a missing condition is said", conditionIs("Stalled", "True"), "no condition Stalled"},
		{"a string field", fieldIs("e2e", "metadata", "labels", "role"), ""},
		{"a number field as jsonpath prints it", fieldIs("1", "status", "plan", "awaitingApproval"), ""},
		{"a field with another value", fieldIs("Succeeded", "status", "phase"), `.status.phase is "Progressing", want "Succeeded"`},
		{"a missing field", fieldIs("1", "status", "plan", "rolledBackTo"), `.status.plan.rolledBackTo is "", want "1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.check(o)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("does not hold: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}
