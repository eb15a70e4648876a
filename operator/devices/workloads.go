// The containers a device reports (device.containers) as its Device carries
// them: bounded and escaped again (readers never trust the agent's bounds),
// and how often status.workloads is written. The restart counts are in
// restarts.go.

package devices

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Bounds of status.workloads (the CRD holds the same ones). A real device
// runs a handful of Deployments of one to a few containers each, with
// names of a few dozen bytes: none comes near them.
const (
	// MaxDeviceWorkloads is how many Deployments status.workloads lists:
	// the first in namespace and name order.
	MaxDeviceWorkloads = 32
	// MaxDeviceWorkloadContainers is how many containers of one
	// Deployment status.workloads lists: the first in the report's order.
	MaxDeviceWorkloadContainers = 16
	// MaxDeviceWorkloadsBytes bounds status.workloads as JSON: the
	// Deployments that fit, in order (the agent's whole report is at most
	// 64 KiB too). A real device's few containers take a few hundred
	// bytes each.
	MaxDeviceWorkloadsBytes = 64 << 10
	// WorkloadsInterval is the least time between two writes of a
	// Device's status.workloads for its containers reports: a device whose
	// containers change every second costs its Device one write a minute.
	// A status write for another reason (liveness, inventory, labels)
	// takes the last report along.
	WorkloadsInterval = time.Minute
)

// Byte bounds of each string of status.workloads, after escaping.
const (
	maxWorkloadName     = 63  // namespace, deployment, container name: DNS labels
	maxWorkloadRevision = 64  // a revision id
	maxWorkloadReason   = 32  // degraded: CrashLoop, OOMKilled, Down, Unhealthy
	maxContainerWord    = 16  // role, state, health, signal
	maxContainerDigest  = 128 // sha256: and 64 hex digits, or an image id
)

// workloadKey names a Deployment: namespace and name.
type workloadKey struct{ ns, name string }

// boundedContainers is a device's containers report as its Device carries
// it, with the Deployment UIDs it named (uids[i] is workloads[i]'s).
type boundedContainers struct {
	workloads []fleetv1.DeviceWorkload
	uids      []string
	// degraded counts the distinct Deployments reported Degraded, listed
	// or not.
	degraded int32
	// truncated: the report had more than the bounds keep, or said so.
	truncated bool
}

// boundContainers applies the bounds of status.workloads to a report (after
// the contract's, events.DeviceContainers.Clip: the first 64 Deployments
// as reported, of at most 16 containers each): every
// string escaped (events.Printable) and cut, numbers clamped, workloads
// sorted by namespace and name with the first of each name kept (a second
// one is dropped), at most MaxDeviceWorkloads of at most
// MaxDeviceWorkloadContainers containers with distinct names, within
// MaxDeviceWorkloadsBytes. It is
// deterministic; c is not modified.
func boundContainers(c events.DeviceContainers) boundedContainers {
	c = c.Clip() // the contract's bounds first: at most 64 workloads of 16 containers
	out := boundedContainers{truncated: c.Truncated}
	type entry struct {
		w   fleetv1.DeviceWorkload
		uid string
		at  int // index in the report: the first of a name wins
	}
	all := make([]entry, 0, min(len(c.Workloads), 4*MaxDeviceWorkloads))
	seen := make(map[workloadKey]bool, len(c.Workloads))
	for i, w := range c.Workloads {
		k := workloadKey{events.PrintableCut(w.Namespace, maxWorkloadName), events.PrintableCut(w.Deployment, maxWorkloadName)}
		if seen[k] {
			out.truncated = true
			continue
		}
		seen[k] = true
		degraded := events.PrintableCut(w.Degraded, maxWorkloadReason)
		if degraded != "" {
			out.degraded = min(out.degraded+1, math.MaxInt32)
		}
		all = append(all, entry{w: fleetv1.DeviceWorkload{Namespace: k.ns, Deployment: k.name,
			Revision: events.PrintableCut(w.RevisionID, maxWorkloadRevision), Degraded: degraded}, uid: w.UID, at: i})
	}
	slices.SortFunc(all, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.w.Namespace, b.w.Namespace), cmp.Compare(a.w.Deployment, b.w.Deployment))
	})
	if len(all) > MaxDeviceWorkloads {
		all, out.truncated = all[:MaxDeviceWorkloads], true
	}
	size := 0
	for _, e := range all {
		var cut bool
		e.w.Containers, cut = boundWorkloadContainers(c.Workloads[e.at].Containers)
		out.truncated = out.truncated || cut
		raw, err := json.Marshal(e.w)
		if err != nil || size+len(raw)+1 > MaxDeviceWorkloadsBytes {
			out.truncated = true
			break
		}
		size += len(raw) + 1 // and a comma
		out.workloads = append(out.workloads, e.w)
		out.uids = append(out.uids, events.PrintableCut(e.uid, maxWorkloadRevision))
	}
	return out
}

// boundWorkloadContainers bounds one Deployment's containers: the first
// MaxDeviceWorkloadContainers of distinct names, in the report's order. It
// reports whether it dropped any.
func boundWorkloadContainers(cs []events.ContainerState) ([]fleetv1.DeviceContainer, bool) {
	var out []fleetv1.DeviceContainer
	names := map[string]bool{}
	cut := false
	for _, c := range cs {
		name := events.PrintableCut(c.Name, maxWorkloadName)
		if names[name] || len(out) == MaxDeviceWorkloadContainers {
			cut = true
			continue
		}
		names[name] = true
		dc := fleetv1.DeviceContainer{
			Name:        name,
			Role:        events.PrintableCut(c.Role, maxContainerWord),
			State:       events.PrintableCut(c.State, maxContainerWord),
			Restarts:    clampInt32(c.Restarts, 0),
			Health:      events.PrintableCut(c.Health, maxContainerWord),
			ImageDigest: events.PrintableCut(c.ImageDigest, maxContainerDigest),
		}
		signal := events.PrintableCut(c.Signal, maxContainerWord)
		if c.ExitCode != 0 || signal != "" || c.OOMKilled || c.ExitedAt != nil {
			dc.LastExit = &fleetv1.ContainerExit{Code: clampInt32(c.ExitCode, math.MinInt32), Signal: signal, OOMKilled: c.OOMKilled,
				At: deviceTime(c.ExitedAt)}
		}
		out = append(out, dc)
	}
	return out, cut
}

// clampInt32 returns n within [lo, math.MaxInt32].
func clampInt32(n int, lo int32) int32 {
	return int32(min(max(int64(n), int64(lo)), math.MaxInt32))
}

// deviceTime is a time of the device's clock as the status shows it, to
// the second; nil for none.
func deviceTime(t *time.Time) *metav1.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &mt
}

// same reports whether b and o say the same.
func (b boundedContainers) same(o boundedContainers) bool {
	return b.degraded == o.degraded && b.truncated == o.truncated && slices.Equal(b.uids, o.uids) &&
		equality.Semantic.DeepEqual(b.workloads, o.workloads)
}

// sameWorkloads reports whether the status already shows b.
func sameWorkloads(b boundedContainers, s fleetv1.DeviceStatus) bool {
	return b.degraded == s.DegradedWorkloads && b.truncated == s.WorkloadsTruncated &&
		equality.Semantic.DeepEqual(b.workloads, s.Workloads)
}

// workloadsEqual compares the workloads fields of two statuses.
func workloadsEqual(a, b fleetv1.DeviceStatus) bool {
	return a.DegradedWorkloads == b.DegradedWorkloads && a.WorkloadsTruncated == b.WorkloadsTruncated &&
		equality.Semantic.DeepEqual(a.Workloads, b.Workloads)
}

// workloadsDue reports whether a Device whose status.workloads was last
// written at last (zero: not by this operator) may be written again at now,
// and else how long until it may.
func workloadsDue(last, now time.Time, interval time.Duration) (bool, time.Duration) {
	if last.IsZero() {
		return true, 0
	}
	wait := last.Add(interval).Sub(now)
	return wait <= 0, wait
}
