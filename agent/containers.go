// The device's container snapshot (ADR 0019, A.4): device.containers,
// device telemetry like the heartbeat, lists every container the agent
// owns on the device, whole, on change.

package agent

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// containers builds the snapshot of the owned containers in all,
// Deployments sorted by namespace and name, the init container first, then
// the services in the score's order (by name for a Deployment not
// watched), within the contract's bounds. The caller holds m.mu.
func (m *monitor) containers(all []runtime.Container) events.DeviceContainers {
	byDep := map[depKey][]runtime.Container{}
	for _, c := range all {
		if m.r.ownsAny(c) {
			k := depKey{c.Labels[LabelNamespace], c.Labels[LabelDeployment]}
			byDep[k] = append(byDep[k], c)
		}
	}
	keys := make([]depKey, 0, len(byDep))
	for k := range byDep {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b depKey) int {
		if c := strings.Compare(a.ns, b.ns); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	var out events.DeviceContainers
	for _, k := range keys {
		if len(out.Workloads) == events.MaxContainerWorkloads {
			out.Truncated = true
			break
		}
		cs := byDep[k]
		spec, watched := m.specs[k]
		order := map[string]int{}
		if watched {
			for i, s := range spec.Services {
				order[s] = i + 1
			}
		}
		slices.SortFunc(cs, func(a, b runtime.Container) int {
			ra, rb := a.Labels[LabelRole] != "init", b.Labels[LabelRole] != "init"
			if ra != rb {
				if !ra {
					return -1
				}
				return 1
			}
			if c := order[a.Name] - order[b.Name]; c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		first := cs[0]
		w := events.WorkloadContainers{Namespace: k.ns, Deployment: k.name, UID: first.Labels[LabelUID],
			Generation: generationOf(first.Labels[LabelGeneration])}
		if watched && spec.Entry.UID == w.UID && spec.Entry.Generation == w.Generation {
			w.RevisionID = spec.Entry.RevisionID
			if d, ok := m.eng.deps[k]; ok && d.degraded {
				w.Degraded = d.reason
			}
		}
		for _, c := range cs {
			if len(w.Containers) == events.MaxWorkloadContainers {
				out.Truncated = true
				break
			}
			w.Containers = append(w.Containers, m.containerState(c))
		}
		out.Workloads = append(out.Workloads, w)
	}
	if out.Workloads == nil {
		out.Workloads = []events.WorkloadContainers{}
	}
	return out
}

// containerState is one container in the snapshot. The caller holds m.mu.
func (m *monitor) containerState(c runtime.Container) events.ContainerState {
	role := events.ContainerRoleService
	if c.Labels[LabelRole] == "init" {
		role = events.ContainerRoleInit
	}
	st := events.ContainerState{Name: clip(c.Name), Role: role, State: string(c.State), Restarts: c.RestartCount,
		ImageDigest: clip(c.ImageDigest)}
	if st.ImageDigest == "" {
		st.ImageDigest = clip(c.Image)
	}
	if !c.StartedAt.IsZero() {
		t := c.StartedAt.UTC()
		st.StartedAt = &t
	}
	if c.State == runtime.StateExited {
		st.ExitCode = c.ExitCode
		st.Signal = signalOf(c.ExitCode)
		if !c.FinishedAt.IsZero() {
			t := c.FinishedAt.UTC()
			st.ExitedAt = &t
		}
	}
	if s, ok := m.seen[c.ID]; ok {
		st.OOMKilled = s.oom
		if d := m.eng.service(s.key, s.hash, s.service); d != nil {
			st.Health = d.obs.Health
			if d.last != nil && c.State != runtime.StateExited {
				st.ExitCode = d.last.ExitCode
				st.Signal = signalOf(d.last.ExitCode)
				t := d.last.At.UTC()
				st.ExitedAt = &t
			}
		}
	}
	return st
}

// clip bounds a string of the snapshot to events.MaxHealthText bytes.
func clip(s string) string {
	if len(s) <= events.MaxHealthText {
		return s
	}
	return strings.ToValidUTF8(s[:events.MaxHealthText], "")
}

// fitContainers drops Deployments from the end of dc, marking it
// truncated, until its report fits events.MaxReportData.
func fitContainers(device string, dc events.DeviceContainers) (events.DeviceContainers, error) {
	for {
		ev, err := events.New(events.Keys{Device: device}, dc, events.WithTime(time.Unix(0, 0)))
		if err != nil {
			return dc, fmt.Errorf("container snapshot: %w", err)
		}
		b, err := ev.Marshal()
		if err != nil {
			return dc, fmt.Errorf("container snapshot: %w", err)
		}
		if len(b) <= events.MaxReportData {
			return dc, nil
		}
		if len(dc.Workloads) == 0 {
			return dc, fmt.Errorf("container snapshot: %w", ErrReportTooLarge)
		}
		dc.Workloads = dc.Workloads[:len(dc.Workloads)-1]
		dc.Truncated = true
	}
}

// marshalData is the JSON of a snapshot, to tell a change.
func marshalData(dc events.DeviceContainers) ([]byte, error) {
	b, err := json.Marshal(dc)
	if err != nil {
		return nil, fmt.Errorf("container snapshot: %w", err)
	}
	return b, nil
}
