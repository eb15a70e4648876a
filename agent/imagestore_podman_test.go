package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// TestTheDiskPreflightOnRealPodman: on real Podman and the real registry,
// a revision whose missing layers do not fit (a margin of the store's
// free space and 1 GiB more) is Failed on the device, naming the image,
// the bytes and the flag, and the running revision keeps running,
// nothing pulled; with the default margin the same revision converges.
func TestTheDiskPreflightOnRealPodman(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	marker := fmt.Sprintf("disk-%d", time.Now().UnixNano())
	big := podmantest.PushImage(t, reg, "fleet-agent-test/disk",
		"FROM "+podmantest.BaseImage+"\nRUN echo "+marker+" > /marker\n"+runsFile)
	// The second subtest pulls it: gone at the end, so that runs do not
	// grow the machine's store (which the preflight's list of local
	// images reads whole when the images do not fit).
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // after the subtests' containers are removed
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt, err := podman.New(ctx, podman.Options{URI: "unix://" + sock})
		if err != nil {
			t.Logf("remove %s: %v", big, err)
			return
		}
		if err := rt.DeleteImage(ctx, big); err != nil && !errors.Is(err, runtime.ErrImageNotFound) {
			t.Logf("remove %s: %v", big, err)
		}
	})
	runs := podmantest.BuildImage(t, "runs", runsFile)
	tests := []struct {
		name   string
		margin func(free int64) int64
		want   events.WorkloadPhase
	}{
		{"a revision that does not fit with the margin is Failed naming the shortfall, and the running one keeps running",
			func(free int64) int64 { return free + 1<<30 }, events.WorkloadFailed},
		{"a revision that fits converges", func(int64) int64 { return 0 }, events.WorkloadConverged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newPodmanWorld(t)
			space, err := w.rt.ImageStoreSpace(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			w.r.ImageStore = w.rt
			w.r.ImageStoreMargin = tt.margin(space.Free)
			w.r.Credentials = creds{"hub": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)}
			d := w.runDaemon(t, agent.Options{})
			d.put(1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: runs}}}})
			testenv.Eventually(t, "generation 1 to converge", testTimeout(t), func() bool { return d.reported(1, events.WorkloadConverged) })
			before := w.byName()[w.name("api")]

			d.put(2, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: big, ImagePullSecret: "hub"}}}})
			testenv.Eventually(t, "generation 2 to be "+string(tt.want), testTimeout(t), func() bool { return d.reported(2, tt.want) })
			after := w.byName()[w.name("api")]
			if tt.want == events.WorkloadConverged {
				if after.Image != big || after.State != runtime.StateRunning {
					t.Errorf("api after generation 2: %+v", after)
				}
				return
			}
			var msg string
			for _, ws := range d.reports(2) {
				if ws.Phase == events.WorkloadFailed {
					msg = ws.Error
				}
			}
			for _, s := range []string{"image " + big + " needs", "are free in", "short", "--image-store-margin"} {
				if !strings.Contains(msg, s) {
					t.Errorf("the failure does not say %q:\n%s", s, msg)
				}
			}
			if strings.Contains(msg, reg.Password) {
				t.Error("the failure holds the registry password")
			}
			if after.ID != before.ID || after.State != runtime.StateRunning {
				t.Errorf("the running revision changed: before %+v, after %+v", before, after)
			}
			if ok, err := w.rt.ImageExists(w.ctx, big); err != nil || ok {
				t.Errorf("the refused image is present: %v, %v", ok, err)
			}
		})
	}
}
