package fleetview

import (
	"fmt"
	"time"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// FollowStage is what a Deployment whose targets follow its selector
// (spec.rollout.targets Follow, ADR 0026) shows: the devices that joined
// its revision after it was frozen, and those that left it, from the
// Deployment's status (the first fleetv1.MaxFollowersListed and
// fleetv1.MaxRemovedListed; the totals count them all).
type FollowStage struct {
	Followers       []FollowerRow  `json:"followers"`
	FollowersTotal  int            `json:"followersTotal"`
	Departures      []DepartureRow `json:"departures"`
	DeparturesTotal int            `json:"departuresTotal"`
}

// FollowerRow is a device that joined the revision after it was frozen:
// why, the label change, and when.
type FollowerRow struct {
	Device string    `json:"device"`
	Reason string    `json:"reason"`
	Change string    `json:"change,omitempty"`
	Since  time.Time `json:"since"`
	// Runs, when set, is the revision the follower runs instead of the
	// Deployment's: it joined after that one's rollout failed and was
	// handed the last whose rollout succeeded.
	Runs string `json:"runs,omitempty"`
}

// DepartureRow is a target that left the revision or was removed from its
// accounting, and why.
type DepartureRow struct {
	Device string `json:"device"`
	Reason string `json:"reason"`
}

// followStageOf is the FollowStage of d; nil for a Frozen Deployment, or
// while its status describes an older generation.
func followStageOf(d *fleetv1.Deployment) *FollowStage {
	if d.Spec.Rollout.Targets != fleetv1.RolloutTargetsFollow || d.Status.ObservedGeneration != d.Generation {
		return nil
	}
	fs := &FollowStage{Followers: []FollowerRow{}, Departures: []DepartureRow{},
		FollowersTotal: int(d.Status.Counts.Followers), DeparturesTotal: int(d.Status.Counts.Removed)}
	handed := 0
	for _, f := range d.Status.Followers {
		row := FollowerRow{Device: clean(f.Device, MaxFieldLength), Reason: clean(f.Reason, MaxFieldLength),
			Change: clean(f.Change, MaxErrorLength), Since: f.Since.Time}
		if f.Revision != nil {
			handed++
			row.Runs = fmt.Sprintf("generation %d (%s), the last whose rollout succeeded", f.Revision.Generation, clean(f.Revision.ID, MaxFieldLength))
		}
		fs.Followers = append(fs.Followers, row)
	}
	// counts.followers counts the followers of the revision itself; those
	// handed the last revision that succeeded are listed too.
	fs.FollowersTotal += handed
	for _, r := range d.Status.Removed {
		fs.Departures = append(fs.Departures, DepartureRow{Device: clean(r.Device, MaxFieldLength), Reason: clean(r.Reason, MaxErrorLength)})
	}
	return fs
}
