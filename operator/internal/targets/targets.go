// Package targets resolves which devices an object of the operator targets
// (Deployments and TaskRuns share the rule) and where device groups come
// from (GroupSource, StaticGroups). Imported by the roles of the operator
// only; package operator re-exports what its callers configure.
package targets

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Resolution is the frozen target set of a revision and why it is what it is.
type Resolution struct {
	// Targets and Canaries are sorted device ids; Canaries ⊆ Targets.
	Targets  []string
	Canaries []string
	// Plan is the frozen rollout plan (ADR 0016), nil when the rollout
	// sets none of its controls; TargetBatches then has one entry per
	// Targets entry, in the same order: 0 for a canary, k for
	// Plan.Batches[k-1].
	Plan          *events.RolloutPlan
	TargetBatches []int
	// TargetGroups has one entry per Targets entry when the plan has a
	// disruption budget: the index of the target's group in
	// Plan.Budget.Values.
	TargetGroups []int
	// Reason and Message explain the result for the TargetsResolved
	// condition.
	Reason  string
	Message string
}

// NoGroupSourceMessage is the TargetsResolved message when allowedGroups is
// set and no group source is configured.
const NoGroupSourceMessage = "allowedGroups is set but the operator has no group source, so no device matches (fail closed); configure a group source or remove allowedGroups"

// ResolveTaskRun applies the rules of Resolve to a TaskRun. A
// TaskRun has no canary stage: Canaries is always empty.
func ResolveTaskRun(ctx context.Context, tr *fleetv1.TaskRun, devices []fleetv1.Device, groups GroupSource) (Resolution, error) {
	r, ex, err := Resolve(ctx, tr.Spec.TargetSelector, tr.Spec.AllowedGroups, devices, groups)
	if err != nil {
		return r, err
	}
	r.Canaries = nil
	if r.Reason == fleetv1.ReasonResolved {
		r.Message = fmt.Sprintf("%d targets, %d quarantined excluded", len(r.Targets), ex.Quarantined)
		if ex.Duplicates > 0 {
			r.Message += fmt.Sprintf(", %d duplicate device ids excluded", ex.Duplicates)
		}
	}
	return r, nil
}

// Excluded counts the matching devices Resolve left out.
type Excluded struct{ Quarantined, Duplicates int }

// Resolve is the target rule shared by Deployments and TaskRuns: the
// devices whose labels match selector, minus quarantined ones (label
// blacklist) and Devices marked DuplicateDeviceID and, when allowedGroups
// is set, only members of one of those groups (none when groups is nil:
// fail closed); Canaries are the targets labelled canary=true. The
// caller words the message of a resolution with targets.
func Resolve(ctx context.Context, selector fleetv1.TargetSelector, allowedGroups []string, devices []fleetv1.Device, groups GroupSource) (Resolution, Excluded, error) {
	if len(allowedGroups) > 0 && groups == nil {
		return Resolution{Reason: fleetv1.ReasonNoGroupSource, Message: NoGroupSourceMessage}, Excluded{}, nil
	}
	var r Resolution
	var ex Excluded
	for i := range devices {
		dev := &devices[i]
		if !dev.DeletionTimestamp.IsZero() || !Matches(selector.MatchLabels, dev.Labels) {
			continue
		}
		if _, q := dev.Labels[fleetv1.LabelBlacklist]; q {
			ex.Quarantined++
			continue
		}
		if duplicateID(dev) {
			ex.Duplicates++
			continue
		}
		if len(allowedGroups) > 0 {
			gs, err := groups.Groups(ctx, dev.Namespace, dev.Name)
			if err != nil {
				return Resolution{}, ex, fmt.Errorf("groups of device %s/%s: %w", dev.Namespace, dev.Name, err)
			}
			if !slices.ContainsFunc(gs, func(g string) bool { return slices.Contains(allowedGroups, g) }) {
				continue
			}
		}
		r.Targets = append(r.Targets, dev.Name)
		if dev.Labels[fleetv1.LabelCanary] == "true" {
			r.Canaries = append(r.Canaries, dev.Name)
		}
	}
	slices.Sort(r.Targets)
	slices.Sort(r.Canaries)
	if len(r.Targets) == 0 {
		r.Reason = fleetv1.ReasonNoMatchingDevices
		r.Message = fmt.Sprintf("no eligible device matches the selector (%d quarantined, %d duplicate device ids)", ex.Quarantined, ex.Duplicates)
		return r, ex, nil
	}
	r.Reason = fleetv1.ReasonResolved
	return r, ex, nil
}

// duplicateID reports whether the Device controller marked dev as a
// duplicate device id (Online condition, reason DuplicateDeviceID).
func duplicateID(dev *fleetv1.Device) bool {
	c := meta.FindStatusCondition(dev.Status.Conditions, fleetv1.ConditionOnline)
	return c != nil && c.Reason == fleetv1.ReasonDuplicateDeviceID
}

// Matches reports whether labels hold every pair of selector.
func Matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// GroupSource answers which device groups a device belongs to. Production
// compositions provide one (for example from Zitadel); the public composition
// has none, and then a Deployment that sets allowedGroups matches no device.
type GroupSource interface {
	// Groups returns the groups of the device in the namespace.
	Groups(ctx context.Context, namespace, device string) ([]string, error)
}

// StaticGroups is a GroupSource from a fixed table: namespace → group →
// devices. It suits private compositions with a file and tests.
type StaticGroups struct {
	mu sync.RWMutex // guards table and subs
	// table: namespace → device → sorted groups
	table map[string]map[string][]string
	// subs are the functions Subscribe registered, by id.
	subs   map[int]func(namespace, device string)
	nextID int
}

// GroupFile is the JSON form of a static group table:
//
//	{"namespaces": {"lab": {"analyzers": ["rpi-042", "rpi-043"]}}}
type GroupFile struct {
	Namespaces map[string]map[string][]string `json:"namespaces"`
}

// NewStaticGroups builds a source from namespace → group → devices.
func NewStaticGroups(namespaces map[string]map[string][]string) *StaticGroups {
	s := &StaticGroups{}
	s.Set(namespaces)
	return s
}

// LoadGroupFile reads a GroupFile.
func LoadGroupFile(path string) (*StaticGroups, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("group file: %w", err)
	}
	var f GroupFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("group file %s: %w (want {\"namespaces\": {\"<ns>\": {\"<group>\": [\"<device>\"]}}})", path, err)
	}
	return NewStaticGroups(f.Namespaces), nil
}

// Set replaces the table.
func (s *StaticGroups) Set(namespaces map[string]map[string][]string) {
	t := map[string]map[string][]string{}
	for ns, groups := range namespaces {
		t[ns] = map[string][]string{}
		for g, devices := range groups {
			for _, d := range devices {
				t[ns][d] = append(t[ns][d], g)
			}
		}
		for d := range t[ns] {
			slices.Sort(t[ns][d])
		}
	}
	s.mu.Lock()
	old := s.table
	s.table = t
	subs := make([]func(string, string), 0, len(s.subs))
	for _, id := range slices.Sorted(maps.Keys(s.subs)) {
		subs = append(subs, s.subs[id])
	}
	s.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	for _, c := range changedMembers(old, t) {
		for _, fn := range subs {
			fn(c[0], c[1])
		}
	}
}

// Subscribe calls fn with the namespace and name of every device whose
// groups a later Set changes, until cancel is called. fn is called from
// Set and must not block.
func (s *StaticGroups) Subscribe(fn func(namespace, device string)) (cancel func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[int]func(string, string){}
	}
	id := s.nextID
	s.nextID++
	s.subs[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.subs, id)
		s.mu.Unlock()
	}
}

// changedMembers lists the (namespace, device) pairs whose groups differ
// between tables a and b, sorted.
func changedMembers(a, b map[string]map[string][]string) [][2]string {
	var out [][2]string
	diff := func(x, y map[string]map[string][]string) {
		for ns, devs := range x {
			for d, gs := range devs {
				if !slices.Equal(gs, y[ns][d]) {
					out = append(out, [2]string{ns, d})
				}
			}
		}
	}
	diff(a, b)
	diff(b, a)
	slices.SortFunc(out, func(p, q [2]string) int {
		if p[0] != q[0] {
			return strings.Compare(p[0], q[0])
		}
		return strings.Compare(p[1], q[1])
	})
	return slices.Compact(out)
}

// Groups implements GroupSource.
func (s *StaticGroups) Groups(_ context.Context, namespace, device string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.table[namespace][device]), nil
}

// Unresolved is the TargetsResolved reason and message of an object whose
// frozen target list is empty (kind names it in the message: "revision",
// "TaskRun"): no group source while allowedGroups is set, or no eligible
// device matched.
func Unresolved(allowedGroups []string, groups GroupSource, kind string) (reason, message string) {
	if len(allowedGroups) > 0 && groups == nil {
		return fleetv1.ReasonNoGroupSource, NoGroupSourceMessage
	}
	return fleetv1.ReasonNoMatchingDevices, "no eligible device matched when the " + kind + " was created"
}
