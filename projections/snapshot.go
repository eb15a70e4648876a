package projections

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Snapshots let a runner resume after a restart instead of folding every
// event again: a fold marshalled after event n and unmarshalled gives the
// same state as the fold of events 1..n, so folding n+1.. onto it gives the
// same values as a rebuild from zero (tested).

type earlySnapshot struct {
	UID         string                  `json:"uid"`
	Generation  int64                   `json:"generation"`
	Results     map[string]DeviceResult `json:"results,omitempty"`
	Failures    map[string]DeviceResult `json:"failures,omitempty"`
	Stage       Stage                   `json:"stage,omitempty"`
	StageAt     time.Time               `json:"stageAt"`
	ReleasedAll bool                    `json:"releasedAll,omitempty"`
	Removed     []RemovedTarget         `json:"removed,omitempty"`
	CanariesAt  time.Time               `json:"canariesAt,omitzero"`
	ReleasedAt  time.Time               `json:"releasedAt,omitzero"`
	Controls    []events.Event          `json:"controls,omitempty"`
	ProgressAt  time.Time               `json:"progressAt,omitzero"`
	// Members and Follow: the membership transitions of a Follow
	// revision (ADR 0026).
	Members []events.Event `json:"members,omitempty"`
	Follow  bool           `json:"follow,omitempty"`
}

type rolloutSnapshot struct {
	UID         string                    `json:"uid"`
	Generation  int64                     `json:"generation"`
	RevisionID  string                    `json:"revisionId"`
	Targets     []string                  `json:"targets"`
	Canaries    []string                  `json:"canaries"`
	Stage       Stage                     `json:"stage"`
	ReleasedAll bool                      `json:"releasedAll"`
	StageAt     time.Time                 `json:"stageAt"`
	Results     map[string]DeviceResult   `json:"results"`
	LastFailure *events.RolloutTransition `json:"lastFailure,omitempty"`
	LastFailAt  time.Time                 `json:"lastFailAt"`
	// LastFailOrder and Reports: absent from snapshots of earlier builds
	// (then 0; the next reports still order after each other).
	LastFailOrder uint64          `json:"lastFailOrder,omitempty"`
	Reports       uint64          `json:"reports,omitempty"`
	Removed       []RemovedTarget `json:"removed,omitempty"`
	CanariesAt    time.Time       `json:"canariesAt,omitzero"`
	ReleasedAt    time.Time       `json:"releasedAt,omitzero"`
	Deleted       bool            `json:"deleted"`
	Early         []earlySnapshot `json:"early,omitempty"`
	// The plan's state (absent without a plan). TargetBatches is aligned
	// with Targets.
	Plan             *events.RolloutPlan `json:"plan,omitempty"`
	TargetBatches    []int               `json:"targetBatches,omitempty"`
	Batches          []BatchState        `json:"batches,omitempty"`
	Batch            int                 `json:"batch,omitempty"`
	AwaitingApproval int                 `json:"awaitingApproval,omitempty"`
	Paused           bool                `json:"paused,omitempty"`
	PausedBy         string              `json:"pausedBy,omitempty"`
	PauseReason      string              `json:"pauseReason,omitempty"`
	Requests         []string            `json:"requests,omitempty"`
	// With a budget: TargetGroups aligned with Targets, and when each
	// batch device was handed the revision.
	TargetGroups []int                `json:"targetGroups,omitempty"`
	Handed       map[string]time.Time `json:"handed,omitempty"`
	// BudgetExtra: the budget values of followers the plan does not
	// know, each a group after the targets without the label (ADR 0026).
	BudgetExtra []string `json:"budgetExtra,omitempty"`
	// LastSucceeded and RolledBackTo: onFailure Rollback.
	LastSucceeded int64 `json:"lastSucceeded,omitempty"`
	RolledBackTo  int64 `json:"rolledBackTo,omitempty"`
	// ProgressAt and ProgressDeadline: the progress clock (absent from
	// snapshots of earlier builds, which the runner does not restore).
	ProgressAt       time.Time     `json:"progressAt,omitzero"`
	ProgressDeadline time.Duration `json:"progressDeadline,omitempty"`
	// Follow and Followers: a Follow revision (ADR 0026).
	Follow    bool       `json:"follow,omitempty"`
	Followers []Follower `json:"followers,omitempty"`
	// Window: the revision's maintenance window (ADR 0029).
	Window *events.MaintenanceWindow `json:"window,omitempty"`
}

// MarshalJSON encodes the whole fold state, the facts of revisions not seen
// yet included.
func (r Rollout) MarshalJSON() ([]byte, error) {
	s := rolloutSnapshot{UID: r.UID, Generation: r.Generation, RevisionID: r.RevisionID, Targets: r.Targets, Canaries: r.Canaries,
		Stage: r.Stage, ReleasedAll: r.ReleasedAll, StageAt: r.StageAt, Results: r.Results, LastFailure: r.LastFailure,
		LastFailAt: r.LastFailAt, LastFailOrder: r.lastFailOrder, Reports: r.reports, Deleted: r.Deleted,
		Removed: r.Removed, CanariesAt: r.CanariesAt, ReleasedAt: r.ReleasedAt,
		Plan: r.Plan, Batches: r.Batches, Batch: r.Batch, AwaitingApproval: r.AwaitingApproval,
		Paused: r.Paused, PausedBy: r.PausedBy, PauseReason: r.PauseReason, Requests: setKeys(r.requests),
		LastSucceeded: r.LastSucceeded, RolledBackTo: r.RolledBackTo, ProgressAt: r.ProgressAt, ProgressDeadline: r.ProgressDeadline,
		Follow: r.Follow, Followers: r.Followers, Window: r.Window}
	if r.planned() {
		s.TargetBatches = make([]int, len(r.Targets))
		for i, d := range r.Targets {
			s.TargetBatches[i] = r.BatchOf(d)
		}
	}
	if r.budgeted() {
		s.TargetGroups = make([]int, len(r.Targets))
		for i, d := range r.Targets {
			s.TargetGroups[i] = r.groupOf[d]
		}
		s.Handed, s.BudgetExtra = r.handed, r.budgetExtra
	}
	for k, f := range r.early {
		s.Early = append(s.Early, earlySnapshot{UID: k.uid, Generation: k.gen, Results: f.results, Failures: f.failures,
			Stage: f.stage, StageAt: f.stageAt, ReleasedAll: f.releasedAll, Removed: f.removed, CanariesAt: f.canariesAt, ReleasedAt: f.releasedAt,
			Controls: f.controls, ProgressAt: f.progressAt, Members: f.members, Follow: f.follow})
	}
	slices.SortFunc(s.Early, func(a, b earlySnapshot) int {
		if c := strings.Compare(a.UID, b.UID); c != 0 {
			return c
		}
		return int(a.Generation - b.Generation)
	})
	return json.Marshal(s)
}

// UnmarshalJSON restores a fold state written by MarshalJSON.
func (r *Rollout) UnmarshalJSON(b []byte) error {
	var s rolloutSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*r = Rollout{UID: s.UID, Generation: s.Generation, RevisionID: s.RevisionID, Targets: s.Targets, Canaries: s.Canaries,
		Stage: s.Stage, ReleasedAll: s.ReleasedAll, StageAt: s.StageAt, Results: s.Results, LastFailure: s.LastFailure,
		LastFailAt: s.LastFailAt, lastFailOrder: s.LastFailOrder, reports: s.Reports, Deleted: s.Deleted,
		Removed: s.Removed, CanariesAt: s.CanariesAt, ReleasedAt: s.ReleasedAt,
		Batch: s.Batch, AwaitingApproval: s.AwaitingApproval, Paused: s.Paused, PausedBy: s.PausedBy, PauseReason: s.PauseReason,
		LastSucceeded: s.LastSucceeded, RolledBackTo: s.RolledBackTo, ProgressAt: s.ProgressAt, ProgressDeadline: s.ProgressDeadline,
		Follow: s.Follow, Followers: s.Followers, Window: s.Window}
	if len(r.Followers) > 0 {
		r.joined = followerIndex(r.Followers)
	}
	if r.Results == nil && r.UID != "" {
		r.Results = map[string]DeviceResult{}
	}
	if s.Plan != nil && len(s.Plan.Batches) > 0 {
		r.Plan, r.Batches = s.Plan, s.Batches
		if len(r.Batches) != len(s.Plan.Batches) {
			r.Batches = make([]BatchState, len(s.Plan.Batches))
		}
		rev := events.DeploymentRevisionCreated{Plan: s.Plan, Targets: s.Targets, TargetBatches: s.TargetBatches, TargetGroups: s.TargetGroups}
		r.batchOf = batchIndex(rev, s.Canaries)
		if s.Plan.Budget != nil {
			r.groupOf, r.handed, r.budgetExtra = groupIndex(rev, len(s.BudgetExtra)), s.Handed, s.BudgetExtra
			if r.handed == nil {
				r.handed = map[string]time.Time{}
			}
		}
	}
	for _, id := range s.Requests {
		if r.requests == nil {
			r.requests = map[string]bool{}
		}
		r.requests[id] = true
	}
	for _, e := range s.Early {
		if r.early == nil {
			r.early = map[revKey]*earlyFacts{}
		}
		f := &earlyFacts{results: e.Results, failures: e.Failures, stage: e.Stage, stageAt: e.StageAt, releasedAll: e.ReleasedAll,
			removed: e.Removed, canariesAt: e.CanariesAt, releasedAt: e.ReleasedAt, controls: e.Controls, progressAt: e.ProgressAt,
			members: e.Members, follow: e.Follow}
		if f.results == nil {
			f.results = map[string]DeviceResult{}
		}
		if f.failures == nil {
			f.failures = map[string]DeviceResult{}
		}
		r.early[revKey{e.UID, e.Generation}] = f
	}
	return nil
}

type intentRevSnapshot struct {
	UID        string      `json:"uid"`
	Generation int64       `json:"generation"`
	Known      bool        `json:"known"`
	Order      int         `json:"order"`
	Entry      IntentEntry `json:"entry"`
	Targets    []string    `json:"targets,omitempty"`
	Released   []string    `json:"released,omitempty"`
	// ReleasedAll and Removed: a rollout.released without a list, and
	// the targets removed before it.
	ReleasedAll bool     `json:"releasedAll,omitempty"`
	Removed     []string `json:"removed,omitempty"`
	Deleted     bool     `json:"deleted,omitempty"`
	// With a rollout plan: the targets' batches, the batches started, the
	// unlisted batch starts not expanded yet, and when each removed target
	// was removed (batches started by then).
	BatchOf       map[string]int `json:"batchOf,omitempty"`
	Batches       int            `json:"batches,omitempty"`
	Unlisted      []int          `json:"unlisted,omitempty"`
	RemovedAfterN map[string]int `json:"removedAfterN,omitempty"`
	// A rollout.rolled-back of the revision.
	RollbackTo    int64    `json:"rollbackTo,omitempty"`
	RolledBack    []string `json:"rolledBack,omitempty"`
	RolledBackAll bool     `json:"rolledBackAll,omitempty"`
	// ReleasedRest and Left: a Follow revision's followers (ADR 0026).
	ReleasedRest bool     `json:"releasedRest,omitempty"`
	Left         []string `json:"left,omitempty"`
	// HandedBack: followers that joined after the revision failed, and
	// the generation each was handed instead.
	HandedBack map[string]int64 `json:"handedBack,omitempty"`
	// Joined: the devices that joined the revision.
	Joined []string `json:"joined,omitempty"`
	// Prefetch: the revision's targets fetch its images ahead (ADR 0027).
	Prefetch bool `json:"prefetch,omitempty"`
	// Canaries, CanariesAll and CanaryRemoved: a canary set too long for
	// its stage to list, that stage, and the targets removed before it
	// while the revision was not known (ADR 0010, addendum).
	Canaries      []string `json:"canaries,omitempty"`
	CanariesAll   bool     `json:"canariesAll,omitempty"`
	CanaryRemoved []string `json:"canaryRemoved,omitempty"`
	// FetchWindow: the revision's fetch window (ADR 0029).
	FetchWindow *events.MaintenanceWindow `json:"fetchWindow,omitempty"`
}

type intentDepSnapshot struct {
	Namespace string              `json:"namespace"`
	Name      string              `json:"name"`
	Order     int                 `json:"order"`
	Revisions []intentRevSnapshot `json:"revisions"`
}

func setKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// intentSnapshot is the snapshot of an Intent fold. Snapshots of earlier
// builds are the bare Deployments list (no TaskRun facts).
type intentSnapshot struct {
	Deployments []intentDepSnapshot  `json:"deployments"`
	Tasks       []intentTaskSnapshot `json:"tasks,omitempty"`
}

// MarshalJSON encodes the fold's facts; the per-device values are derived
// from them again on restore.
func (s *Intent) MarshalJSON() ([]byte, error) {
	var deps []intentDepSnapshot
	for k, revs := range s.deps {
		d := intentDepSnapshot{Namespace: k.ns, Name: k.name, Order: s.order[k]}
		for rk, r := range revs {
			d.Revisions = append(d.Revisions, intentRevSnapshot{UID: rk.uid, Generation: rk.gen, Known: r.known, Order: r.order,
				Entry: r.entry, Targets: setKeys(r.targets), Released: setKeys(r.released),
				ReleasedAll: r.releasedAll, Removed: setKeys(r.removed), Deleted: r.deleted,
				BatchOf: r.batchOf, Batches: r.batches, Unlisted: r.unlisted, RemovedAfterN: r.removedAfterN,
				RollbackTo: r.rollbackTo, RolledBack: setKeys(r.rolledBack), RolledBackAll: r.rolledBackAll,
				ReleasedRest: r.releasedRest, Left: setKeys(r.left), HandedBack: r.handedBack, Joined: setKeys(r.joined), Prefetch: r.prefetch,
				Canaries: r.canaries, CanariesAll: r.canariesAll, CanaryRemoved: setKeys(r.canaryRemoved), FetchWindow: r.fetchWindow})
		}
		slices.SortFunc(d.Revisions, func(a, b intentRevSnapshot) int {
			if c := strings.Compare(a.UID, b.UID); c != 0 {
				return c
			}
			return int(a.Generation - b.Generation)
		})
		deps = append(deps, d)
	}
	slices.SortFunc(deps, func(a, b intentDepSnapshot) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return json.Marshal(intentSnapshot{Deployments: deps, Tasks: s.taskSnapshots()})
}

// UnmarshalJSON restores a fold written by MarshalJSON.
func (s *Intent) UnmarshalJSON(b []byte) error {
	var snap intentSnapshot
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '[' {
		// An earlier build's snapshot: Deployments only.
		if err := json.Unmarshal(b, &snap.Deployments); err != nil {
			return err
		}
	} else if err := json.Unmarshal(b, &snap); err != nil {
		return err
	}
	*s = *NewIntent()
	s.restoreTasks(snap.Tasks)
	for _, d := range snap.Deployments {
		k := depKey{d.Namespace, d.Name}
		s.order[k] = d.Order
		for _, rs := range d.Revisions {
			r := s.rev(k, revKey{rs.UID, rs.Generation})
			r.known, r.order, r.entry, r.deleted = rs.Known, rs.Order, rs.Entry, rs.Deleted
			for _, t := range rs.Targets {
				r.targets[t] = true
			}
			for _, t := range rs.Released {
				r.released[t] = true
			}
			r.releasedAll = rs.ReleasedAll
			r.batchOf, r.batches, r.unlisted, r.removedAfterN = rs.BatchOf, rs.Batches, rs.Unlisted, rs.RemovedAfterN
			r.rollbackTo, r.rolledBackAll = rs.RollbackTo, rs.RolledBackAll
			r.releasedRest, r.prefetch, r.handedBack = rs.ReleasedRest, rs.Prefetch, rs.HandedBack
			for _, d := range rs.Joined {
				if r.joined == nil {
					r.joined = map[string]bool{}
				}
				r.joined[d] = true
			}
			r.canaries, r.canariesAll = rs.Canaries, rs.CanariesAll
			if r.canariesAll && !r.known {
				r.canaryRemoved = map[string]bool{}
				for _, d := range rs.CanaryRemoved {
					r.canaryRemoved[d] = true
				}
			}
			r.fetchWindow = rs.FetchWindow
			for _, d := range rs.Left {
				if r.left == nil {
					r.left = map[string]bool{}
				}
				r.left[d] = true
			}
			for _, d := range rs.RolledBack {
				if r.rolledBack == nil {
					r.rolledBack = map[string]bool{}
				}
				r.rolledBack[d] = true
			}
			for _, t := range rs.Removed {
				if r.removed == nil {
					r.removed = map[string]bool{}
				}
				r.removed[t] = true
			}
			s.touch(k, rs.Targets...)
			s.touch(k, rs.Released...)
		}
		s.recompute(k)
	}
	return nil
}
