package k8s_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
)

// TestTheAgentReadsEveryScoreFieldTheCRDHas guards the agent's k8s-free copy
// of the PodmanV0 types: a score marshalled from the CRD types must survive
// the agent's decoding unchanged.
func TestTheAgentReadsEveryScoreFieldTheCRDHas(t *testing.T) {
	score := validDeployment("x").Spec.Score
	score.Data.Services[0].Volumes[0].ReadOnly = true
	raw, err := json.Marshal(score)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := agent.ParseScore(raw)
	if err != nil {
		t.Fatal(err)
	}
	back, err := json.Marshal(parsed)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the agent loses score fields (-CRD +agent):\n%s", diff)
	}
}
