package fleetview

import (
	"context"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/history"
)

func TestTimelineMemo(t *testing.T) {
	ctx := context.Background()
	m := newTimelineMemo()
	reads := 0
	read := func(context.Context, string, string) (*history.DeploymentTimeline, error) {
		reads++
		return &history.DeploymentTimeline{Name: "web"}, nil
	}
	get := func(at time.Time) {
		t.Helper()
		if _, err := m.deployment(ctx, "apps", "web", at, read); err != nil {
			t.Fatal(err)
		}
	}
	get(testNow)
	get(testNow.Add(time.Second))
	if reads != 1 {
		t.Fatalf("two views read the streams %d times, want once", reads)
	}
	m.invalidate([]PageRef{{Kind: PageDeployment, Key: "apps/other"}, {Kind: PageDevice, Key: "web"}})
	get(testNow.Add(2 * time.Second))
	if reads != 1 {
		t.Errorf("a change of other pages dropped the timeline (%d reads)", reads)
	}
	m.invalidate([]PageRef{{Kind: PageDeployment, Key: "apps/web"}})
	get(testNow.Add(3 * time.Second))
	if reads != 2 {
		t.Errorf("a change of the Deployment did not drop its timeline (%d reads)", reads)
	}
	get(testNow.Add(3*time.Second + memoTTL))
	if reads != 3 {
		t.Errorf("a timeline older than the TTL was served (%d reads)", reads)
	}

	t.Run("a read that raced a change is not kept", func(t *testing.T) {
		m := newTimelineMemo()
		racing := func(context.Context, string, string) (*history.DeploymentTimeline, error) {
			reads++
			m.invalidate([]PageRef{{Kind: PageDeployment, Key: "apps/web"}})
			return &history.DeploymentTimeline{}, nil
		}
		before := reads
		for range 2 {
			if _, err := m.deployment(ctx, "apps", "web", testNow, racing); err != nil {
				t.Fatal(err)
			}
		}
		if reads-before != 2 {
			t.Errorf("%d reads, want 2: the first, racing a change, must not be kept", reads-before)
		}
	})
}
