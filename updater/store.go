package updater

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Record is a task's record, one JSON file per task id under the state
// folder's tasks/ (written atomically: a temporary file, fsync, rename).
type Record struct {
	Response
	// Started and Finished are when the task began and ended (zero while
	// running).
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Previous is, for an agent-upgrade, the executable the agent ran
	// before (where its link pointed), for restoring it.
	Previous string `json:"previous,omitempty"`
}

// store keeps the records of tasks under dir.
type store struct {
	dir string
}

func newStore(stateDir string) (*store, error) {
	dir := filepath.Join(stateDir, "tasks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state folder: %w", err)
	}
	return &store{dir: dir}, nil
}

func (s *store) path(id string) string { return filepath.Join(s.dir, id+".json") }

// get returns the record of id; ok is false when there is none.
func (s *store) get(id string) (Record, bool, error) {
	b, err := os.ReadFile(s.path(id))
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read task record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return Record{}, false, fmt.Errorf("task record %s does not decode: %w", id, err)
	}
	return r, true, nil
}

// put writes a record atomically.
func (s *store) put(r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(s.dir, ".tmp-"+r.ID+"-*")
	if err != nil {
		return fmt.Errorf("write task record: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		return fmt.Errorf("write task record: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("write task record: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write task record: %w", err)
	}
	if err := os.Rename(f.Name(), s.path(r.ID)); err != nil {
		return fmt.Errorf("write task record: %w", err)
	}
	if d, err := os.Open(s.dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// running returns the records still marked running: tasks the updater was
// stopped in.
func (s *store) running() ([]Record, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("read state folder: %w", err)
	}
	var out []Record
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(e.Name(), ".") || !idPattern.MatchString(id) {
			continue
		}
		r, ok, err := s.get(id)
		if err != nil || !ok {
			continue
		}
		if !r.Done() {
			out = append(out, r)
		}
	}
	return out, nil
}
