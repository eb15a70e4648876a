package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// ScoreDigest is the sha256 of the score's canonical JSON (field order is
// fixed by the Go types, so the encoding is stable).
func ScoreDigest(s fleetv1.Score) (string, json.RawMessage, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return "", nil, fmt.Errorf("encode score: %w", err)
	}
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:]), raw, nil
}

// RevisionID names a revision for humans: the generation and the first
// digits of the score digest.
func RevisionID(generation int64, scoreDigest string) string {
	d := scoreDigest
	if len(d) > len("sha256:")+8 {
		d = d[len("sha256:") : len("sha256:")+8]
	}
	return fmt.Sprintf("%d-%s", generation, d)
}

// revisionEvent builds the revision event of a Deployment's generation.
func revisionEvent(d *fleetv1.Deployment, r Resolution) (events.Event, error) {
	digest, raw, err := ScoreDigest(d.Spec.Score)
	if err != nil {
		return events.Event{}, err
	}
	data := events.DeploymentRevisionCreated{
		UID: string(d.UID), Generation: d.Generation, RevisionID: RevisionID(d.Generation, digest),
		ScoreDigest: digest, Score: raw, Targets: nonNil(r.Targets), Canaries: nonNil(r.Canaries),
	}
	ev, err := events.New(events.Keys{Namespace: d.Namespace, Name: d.Name}, data, events.WithCorrelation(string(d.UID), d.Generation))
	if err != nil {
		return events.Event{}, err
	}
	if b, err := ev.Marshal(); err == nil && len(b) > events.MaxEventSize-4096 {
		// Chunked target lists (deployment.revision.targets) are not
		// written yet: refuse loudly rather than truncate.
		return events.Event{}, fmt.Errorf("revision %s of %s/%s: %d targets do not fit in one event (%d bytes); chunked target lists are not implemented yet",
			data.RevisionID, d.Namespace, d.Name, len(r.Targets), len(b))
	}
	return ev, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
