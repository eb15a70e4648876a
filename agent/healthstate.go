// The monitor's state file (ADR 0019, A.3 "Agent restart"): which tracked
// revisions are Degraded, how many reports each Deployment made in the
// last hour, and the last health report of each, so that an agent restart
// neither forgets a Degraded Deployment nor reports it again. It is a
// cache, the one departure from "no local state": losing it costs at most
// one redundant report per Deployment (the engine rule, healthEngine's
// probing).

package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// HealthStateFile is the name of the state file in the state directory.
const HealthStateFile = "health.json"

// healthStateVersion is the version of the file's format; a file of
// another version is ignored (as if lost).
const healthStateVersion = 1

// maxHealthStateSize bounds the file read back: a larger one is ignored.
const maxHealthStateSize = 4 << 20

// healthState is the file's content.
type healthState struct {
	Version     int           `json:"version"`
	Deployments []savedHealth `json:"deployments"`
}

// savedHealth is one Deployment's health as the file keeps it.
type savedHealth struct {
	Namespace  string       `json:"namespace"`
	Name       string       `json:"name"`
	UID        string       `json:"uid"`
	Generation int64        `json:"generation"`
	RevisionID string       `json:"revisionId"`
	Hash       string       `json:"hash"`
	Degraded   bool         `json:"degraded"`
	Reason     string       `json:"reason,omitempty"`
	Since      time.Time    `json:"since"`
	K          int          `json:"k,omitempty"`
	Marks      []healthMark `json:"marks,omitempty"`
	// Last is the last health report sent, as published (subject, data
	// and headers), re-sent byte for byte after a reconnect.
	Last *savedMsg `json:"last,omitempty"`
}

// savedMsg is a published report.
type savedMsg struct {
	Subject string              `json:"subject"`
	Header  map[string][]string `json:"header"`
	Data    json.RawMessage     `json:"data"`
}

func (s savedHealth) key() depKey { return depKey{s.Namespace, s.Name} }

func (s savedHealth) rev() healthRev {
	return healthRev{UID: s.UID, Generation: s.Generation, RevisionID: s.RevisionID, Hash: s.Hash}
}

// loadHealthState reads the state file of dir. A missing, unreadable or
// invalid file is an error (the caller then decides from the engine);
// dir "" is fs.ErrNotExist.
func loadHealthState(dir string) (healthState, error) {
	if dir == "" {
		return healthState{}, fmt.Errorf("health state: no state directory: %w", fs.ErrNotExist)
	}
	p := filepath.Join(dir, HealthStateFile)
	fi, err := os.Stat(p)
	if err != nil {
		return healthState{}, fmt.Errorf("health state: %w", err)
	}
	if fi.Size() > maxHealthStateSize {
		return healthState{}, fmt.Errorf("health state: %s is %d bytes, more than %d", p, fi.Size(), maxHealthStateSize)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return healthState{}, fmt.Errorf("health state: %w", err)
	}
	var st healthState
	if err := json.Unmarshal(b, &st); err != nil {
		return healthState{}, fmt.Errorf("health state: %s: %w", p, err)
	}
	if st.Version != healthStateVersion {
		return healthState{}, fmt.Errorf("health state: %s has version %d, want %d", p, st.Version, healthStateVersion)
	}
	return st, nil
}

// saveHealthState writes st to dir atomically (a temporary file renamed
// over the old one); dir "" writes nothing.
func saveHealthState(dir string, st healthState) error {
	if dir == "" {
		return nil
	}
	st.Version = healthStateVersion
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("health state: encode: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+HealthStateFile+".*")
	if err != nil {
		return fmt.Errorf("health state: %w", err)
	}
	tmp := f.Name()
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("health state: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, HealthStateFile)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("health state: %w", err)
	}
	return nil
}

// restore gives the engine the state read at start (ok false: there was
// no usable file, and the engine rule decides).
func (h *healthEngine) restore(st healthState, ok bool) {
	h.noFile = !ok
	for _, s := range st.Deployments {
		k := s.key()
		h.saved[k] = s
		marks := slices.Clone(s.Marks)
		if len(marks) > 2*(maxDegradedPerHour+maxRecoveredPerHour) {
			marks = marks[len(marks)-2*(maxDegradedPerHour+maxRecoveredPerHour):]
		}
		h.marks[k] = marks
	}
}

// state is what the file keeps now: every tracked Deployment that is
// Degraded or made a report in the last hour, with last its last report
// (from lasts, by Deployment).
func (h *healthEngine) state(lasts map[depKey]*savedMsg) healthState {
	var st healthState
	for k, d := range h.deps {
		if !d.degraded && len(h.marks[k]) == 0 {
			continue
		}
		st.Deployments = append(st.Deployments, savedHealth{Namespace: k.ns, Name: k.name, UID: d.rev.UID,
			Generation: d.rev.Generation, RevisionID: d.rev.RevisionID, Hash: d.rev.Hash, Degraded: d.degraded,
			Reason: d.reason, Since: d.since, K: d.k, Marks: slices.Clone(h.marks[k]), Last: lasts[k]})
	}
	slices.SortFunc(st.Deployments, func(a, b savedHealth) int { return cmpString(a.key().String(), b.key().String()) })
	return st
}
