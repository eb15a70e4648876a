package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// Restore brings back, without the intent, the services this device's
// agent created that are down after a reboot: each service container that
// is created but never started, or exited and restarted by the restart
// policy it was created with (LabelRestartPolicy: always and
// unless-stopped, on-failure when it failed). The agent calls it when it
// cannot read its intent (a device that boots without network), so its
// workloads run again before the control plane can be asked; once the
// intent is read, passes decide as usual. Init containers are never
// started (they run only in a pass, before their services), nor are
// services without the label (created by an agent before it existed). It
// returns the names of the services it started.
func (r *Reconciler) Restore(ctx context.Context) ([]string, error) {
	all, err := r.rt().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	var started []string
	var errs []error
	for _, c := range all {
		if !r.ownsAny(c) || c.Labels[LabelRole] != "service" {
			continue
		}
		policy, ok := c.Labels[LabelRestartPolicy]
		switch {
		case !ok:
			continue
		case c.State == runtime.StateCreated:
		case c.State == runtime.StateExited && restarts(policy, failed(c)):
		default:
			continue
		}
		if err := r.rt().Start(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("start service %s: %w", c.Name, err))
			continue
		}
		started = append(started, c.Name)
	}
	return started, errors.Join(errs...)
}
