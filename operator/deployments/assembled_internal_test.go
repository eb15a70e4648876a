package deployments

import (
	"context"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
)

// assembledRevisions reads subject from its start through an
// events.RevisionAssembler, as a reader does, and returns the revisions it
// assembles whole; an error fails the test.
func assembledRevisions(t *testing.T, ctx context.Context, st *events.Store, subject string) []events.DeploymentRevisionCreated {
	t.Helper()
	var a events.RevisionAssembler
	var whole []events.DeploymentRevisionCreated
	for rec, err := range st.Replay(ctx, subject, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		ev, ok, err := a.Add(rec.Event)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got, err := events.Decode[events.DeploymentRevisionCreated](ev)
			if err != nil {
				t.Fatal(err)
			}
			whole = append(whole, got)
		}
	}
	return whole
}
