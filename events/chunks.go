package events

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ChunkBytes is the most target and canary id bytes one
// TypeDeploymentRevisionTargets event carries: half of MaxEventSize, so a
// chunk with its envelope and JSON quoting always fits.
const ChunkBytes = MaxEventSize / 2

// ErrChunksMissing is returned by RevisionAssembler.Add for a chunked
// revision whose chunks it has not read (all of them, in order, just before
// the revision on its subject).
var ErrChunksMissing = errors.New("target chunks of the revision are missing")

// TargetsDigest is the digest of a complete frozen target list: "sha256:"
// and the hex sha256 of the sorted ids joined by newlines.
func TargetsDigest(targets []string) string {
	sum := sha256.Sum256([]byte(strings.Join(slices.Sorted(slices.Values(targets)), "\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ChunkRevision splits a revision whose target and canary ids (and, with a
// plan, the targets' batch numbers) exceed maxBytes (ChunkBytes when 0)
// into chunks of at most maxBytes each. The revision it returns carries no
// targets, canaries or target batches, the chunk count and the digest of
// the complete target list (its plan stays in it); the chunks carry the
// targets, each with its TargetBatches entry, then the canaries, in order.
// A revision that fits is returned unchanged, with no chunks.
func ChunkRevision(d DeploymentRevisionCreated, maxBytes int) (DeploymentRevisionCreated, []DeploymentRevisionTargets) {
	if maxBytes <= 0 {
		maxBytes = ChunkBytes
	}
	withBatches := len(d.TargetBatches) > 0
	withGroups := len(d.TargetGroups) > 0
	// cost is the bytes target i (or a canary, i < 0) adds to a chunk:
	// the quoted id and its comma, its batch number and comma, and its
	// group number and comma.
	cost := func(id string, i int) int {
		n := len(id) + 3
		if withBatches && i >= 0 && i < len(d.TargetBatches) {
			n += len(strconv.Itoa(d.TargetBatches[i])) + 1
		}
		if withGroups && i >= 0 && i < len(d.TargetGroups) {
			n += len(strconv.Itoa(d.TargetGroups[i])) + 1
		}
		return n
	}
	total := 0
	for i, t := range d.Targets {
		total += cost(t, i)
	}
	for _, c := range d.Canaries {
		total += cost(c, -1)
	}
	if total <= maxBytes {
		return d, nil
	}
	var chunks []DeploymentRevisionTargets
	cur := DeploymentRevisionTargets{UID: d.UID, Generation: d.Generation, Chunk: 1, Targets: []string{}}
	n := 0
	add := func(id string, i int, canary bool) {
		c := cost(id, i)
		if n > 0 && n+c > maxBytes {
			chunks = append(chunks, cur)
			cur = DeploymentRevisionTargets{UID: d.UID, Generation: d.Generation, Chunk: len(chunks) + 1, Targets: []string{}}
			n = 0
		}
		n += c
		switch {
		case canary:
			cur.Canaries = append(cur.Canaries, id)
		default:
			cur.Targets = append(cur.Targets, id)
			if withBatches && i < len(d.TargetBatches) {
				cur.TargetBatches = append(cur.TargetBatches, d.TargetBatches[i])
			}
			if withGroups && i < len(d.TargetGroups) {
				cur.TargetGroups = append(cur.TargetGroups, d.TargetGroups[i])
			}
		}
	}
	for i, t := range d.Targets {
		add(t, i, false)
	}
	for _, c := range d.Canaries {
		add(c, -1, true)
	}
	chunks = append(chunks, cur)
	out := d
	out.Targets, out.Canaries, out.TargetBatches, out.TargetGroups = []string{}, []string{}, nil, nil
	out.TargetChunks, out.TargetsDigest = len(chunks), TargetsDigest(d.Targets)
	return out, chunks
}

// ChunkTaskRun splits a TaskRun creation whose target ids exceed maxBytes
// (ChunkBytes when 0) into chunks of at most maxBytes each, as ChunkRevision
// does a revision: the creation it returns carries no targets, the chunk
// count and the digest of the complete target list; the chunks carry the
// targets in order. A creation that fits is returned unchanged, with no
// chunks (its bytes are those of an unchunked creation).
func ChunkTaskRun(d TaskRunCreated, maxBytes int) (TaskRunCreated, []TaskRunTargets) {
	if maxBytes <= 0 {
		maxBytes = ChunkBytes
	}
	total := 0
	for _, t := range d.Targets {
		total += len(t) + 3
	}
	if total <= maxBytes {
		return d, nil
	}
	var chunks []TaskRunTargets
	cur := TaskRunTargets{UID: d.UID, Generation: d.Generation, Chunk: 1, Targets: []string{}}
	n := 0
	for _, t := range d.Targets {
		c := len(t) + 3
		if n > 0 && n+c > maxBytes {
			chunks = append(chunks, cur)
			cur = TaskRunTargets{UID: d.UID, Generation: d.Generation, Chunk: len(chunks) + 1, Targets: []string{}}
			n = 0
		}
		n += c
		cur.Targets = append(cur.Targets, t)
	}
	chunks = append(chunks, cur)
	out := d
	out.Targets = []string{}
	out.TargetChunks, out.TargetsDigest = len(chunks), TargetsDigest(d.Targets)
	return out, chunks
}

// RevisionAssembler puts chunked revisions and chunked TaskRun creations
// back together for readers of intent subjects (Deployment and TaskRun).
// Feed it every event of those subjects in subject order (only those:
// chunks are intent events). The rule: a revision (or a taskrun.created)
// with TargetChunks n is complete only when the n chunks read just before
// it on its subject are chunks 1..n of the same UID and generation, in
// order, and their targets match its TargetsDigest. Chunk 1 starts a new
// set, so chunks left by an attempt that never appended its revision (a
// crash, a lost race) are orphans and ignored.
type RevisionAssembler struct {
	pending map[pendingKey]*chunkSet
}

// pendingKey names one intent subject: a Deployment's or a TaskRun's.
type pendingKey struct {
	taskRun bool
	keys    Keys
}

type chunkSet struct {
	uid               string
	generation        int64
	chunks            int
	targets, canaries []string
	batches, groups   []int
	broken            bool
	// misaligned names the first chunk whose TargetBatches are neither
	// absent nor one per target (0: none).
	misaligned int
}

// Add folds one event. It returns the event to fold, with a chunked
// revision made whole (its Targets, Canaries and TargetBatches complete,
// TargetChunks 0), and true; false for a chunk (kept until its revision
// comes) and for a revision that cannot be made whole (the error says why;
// ErrChunksMissing when the chunks were not read) or whose plan does not
// match its targets (chunked or not: CheckPlan, ErrPlanMisaligned). A
// chunked taskrun.created is made whole (or refused) the same way, from
// its taskrun.targets chunks. Other events are returned as they are.
func (a *RevisionAssembler) Add(ev Event) (Event, bool, error) {
	switch ev.Type {
	case TypeTaskRunTargets:
		d, err := Decode[TaskRunTargets](ev)
		if err != nil {
			delete(a.pending, pendingKey{true, ev.Keys})
			return ev, false, err
		}
		set := a.start(pendingKey{true, ev.Keys}, d.UID, d.Generation, d.Chunk)
		set.chunks++
		set.targets = append(set.targets, d.Targets...)
		return ev, false, nil
	case TypeTaskRunCreated:
		k := pendingKey{true, ev.Keys}
		set := a.pending[k]
		delete(a.pending, k)
		d, err := Decode[TaskRunCreated](ev)
		if err != nil || d.TargetChunks == 0 {
			return ev, true, nil // the readers judge it as before
		}
		if set == nil || set.broken || set.uid != d.UID || set.generation != d.Generation || set.chunks != d.TargetChunks {
			return ev, false, fmt.Errorf("%w: TaskRun uid %s (generation %d) names %d chunks", ErrChunksMissing, d.UID, d.Generation, d.TargetChunks)
		}
		if got := TargetsDigest(set.targets); got != d.TargetsDigest {
			return ev, false, fmt.Errorf("TaskRun uid %s (generation %d): its %d chunks' targets have digest %s, the creation names %s",
				d.UID, d.Generation, d.TargetChunks, got, d.TargetsDigest)
		}
		d.Targets = append(d.Targets, set.targets...)
		d.TargetChunks, d.TargetsDigest = 0, ""
		raw, err := json.Marshal(d)
		if err != nil {
			return ev, false, fmt.Errorf("encode assembled TaskRun creation: %w", err)
		}
		whole := ev
		whole.Data = raw
		return whole, true, nil
	case TypeDeploymentRevisionTargets:
		d, err := Decode[DeploymentRevisionTargets](ev)
		if err != nil {
			delete(a.pending, pendingKey{false, ev.Keys})
			return ev, false, err
		}
		set := a.start(pendingKey{false, ev.Keys}, d.UID, d.Generation, d.Chunk)
		set.chunks++
		if (len(d.TargetBatches) > 0 && len(d.TargetBatches) != len(d.Targets) ||
			len(d.TargetGroups) > 0 && len(d.TargetGroups) != len(d.Targets)) && set.misaligned == 0 {
			set.misaligned = d.Chunk
		}
		set.groups = append(set.groups, d.TargetGroups...)
		set.targets = append(set.targets, d.Targets...)
		set.canaries = append(set.canaries, d.Canaries...)
		set.batches = append(set.batches, d.TargetBatches...)
		return ev, false, nil
	case TypeDeploymentRevisionCreated:
		set := a.pending[pendingKey{false, ev.Keys}]
		delete(a.pending, pendingKey{false, ev.Keys})
		d, err := Decode[DeploymentRevisionCreated](ev)
		if err != nil {
			return ev, true, nil // the readers judge it as before
		}
		if d.TargetChunks == 0 {
			if err := d.CheckPlan(); err != nil {
				return ev, false, err
			}
			return ev, true, nil
		}
		if set == nil || set.broken || set.uid != d.UID || set.generation != d.Generation || set.chunks != d.TargetChunks {
			return ev, false, fmt.Errorf("%w: revision %s (generation %d) names %d chunks", ErrChunksMissing, d.RevisionID, d.Generation, d.TargetChunks)
		}
		if got := TargetsDigest(set.targets); got != d.TargetsDigest {
			return ev, false, fmt.Errorf("revision %s (generation %d): its %d chunks' targets have digest %s, the revision names %s",
				d.RevisionID, d.Generation, d.TargetChunks, got, d.TargetsDigest)
		}
		if set.misaligned > 0 {
			return ev, false, fmt.Errorf("%w: revision %s (generation %d): chunk %d carries targetBatches or targetGroups that are not one per target",
				ErrPlanMisaligned, d.RevisionID, d.Generation, set.misaligned)
		}
		d.Targets = append(d.Targets, set.targets...)
		d.Canaries = append(d.Canaries, set.canaries...)
		if d.Canaries == nil {
			d.Canaries = []string{}
		}
		d.TargetBatches = append(d.TargetBatches, set.batches...)
		d.TargetGroups = append(d.TargetGroups, set.groups...)
		if err := d.CheckPlan(); err != nil {
			return ev, false, err
		}
		d.TargetChunks, d.TargetsDigest = 0, ""
		raw, err := json.Marshal(d)
		if err != nil {
			return ev, false, fmt.Errorf("encode assembled revision: %w", err)
		}
		whole := ev
		whole.Data = raw
		return whole, true, nil
	}
	return ev, true, nil
}

// start returns the chunk set of k that a chunk (uid, generation, chunk)
// continues: chunk 1 starts a new one; a chunk that does not follow the
// set's last breaks it.
func (a *RevisionAssembler) start(k pendingKey, uid string, generation int64, chunk int) *chunkSet {
	if a.pending == nil {
		a.pending = map[pendingKey]*chunkSet{}
	}
	set := a.pending[k]
	if chunk == 1 || set == nil {
		set = &chunkSet{uid: uid, generation: generation, broken: chunk != 1}
		a.pending[k] = set
	}
	if uid != set.uid || generation != set.generation || chunk != set.chunks+1 {
		set.broken = true
	}
	return set
}

// Pending is the number of Deployments and TaskRuns with chunks read and no
// revision (or creation) yet.
func (a *RevisionAssembler) Pending() int { return len(a.pending) }
