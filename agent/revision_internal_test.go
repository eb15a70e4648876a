package agent

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nationtech/harmony-fleet/score"
)

// TestTheRevisionOfAScoreNeverChanges pins the revision hash of a fixed
// score: it is every container's LabelRevision, so a change of the score
// types' JSON (a field renamed, reordered, its omitempty dropped) would make
// an upgraded agent replace every container it runs.
func TestTheRevisionOfAScoreNeverChanges(t *testing.T) {
	raw := json.RawMessage(`{"type":"PodmanV0","data":{
		"init_container":{"name":"migrate","image":"reg.example/migrate:v1","restart_policy":"no",
			"secret_env":[{"name":"DB_PASSWORD","secret":"lab/db","key":"password"}]},
		"services":[{"name":"api","image":"reg.example/api:v1","ports":["8080:80","53:53/udp"],
			"env":[{"name":"MODE","value":"prod"},{"name":"A","value":"1"}],
			"secret_env":[{"name":"DB_PASSWORD","secret":"lab/db","key":"password"}],
			"volumes":[{"host_path":"/var/lib/api","container_path":"/data","read_only":true},{"host_path":"/tmp","container_path":"/tmp"}],
			"restart_policy":"always","image_pull_secret":"hub"},
			{"name":"worker","image":"reg.example/worker@sha256:1111111111111111111111111111111111111111111111111111111111111111"}]}}`)
	s, err := score.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	res, err := resolve(context.Background(), s, fixedSecrets{})
	if err != nil {
		t.Fatal(err)
	}
	const want = "4be0be82d6c462a61ad4770392f179614c631e3871de1ae30f79af5b10389250"
	if res.revision != want {
		t.Errorf("revision %s, want %s: the score's JSON changed, and every container an agent runs would be replaced on upgrade", res.revision, want)
	}
}

type fixedSecrets struct{}

func (fixedSecrets) Resolve(_ context.Context, path, key string) (string, error) {
	return "value-of-" + path + "/" + key, nil
}
