package targets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// DefaultGroupFileInterval is GroupFileWatch.Interval when zero.
const DefaultGroupFileInterval = 10 * time.Second

// GroupFileWatch reads a group file again every Interval and replaces
// the table of Groups when its content changed, so a membership change
// reaches the StaticGroups' subscribers (the followers watch) without a
// restart. A file that cannot be read or parsed is logged and the table
// kept as it was.
type GroupFileWatch struct {
	// Path is the group file (GroupFile's JSON form).
	Path string
	// Groups is the table LoadGroupFile returned for Path.
	Groups *StaticGroups
	// Interval between two reads; zero: DefaultGroupFileInterval.
	Interval time.Duration
	// Log receives read and parse errors; nil: they are dropped.
	Log *slog.Logger
}

// Validate reports a watch that cannot run, naming the field and the fix.
func (w *GroupFileWatch) Validate() error {
	switch {
	case w.Path == "":
		return errors.New("group file watch: Path is empty: set the group file's path")
	case w.Groups == nil:
		return errors.New("group file watch: Groups is nil: set the table LoadGroupFile returned")
	case w.Interval < 0:
		return fmt.Errorf("group file watch: Interval is %s: use a positive duration (default %s)", w.Interval, DefaultGroupFileInterval)
	}
	return nil
}

// Run reads the file every Interval until ctx ends.
func (w *GroupFileWatch) Run(ctx context.Context) error {
	if err := w.Validate(); err != nil {
		return err
	}
	interval := w.Interval
	if interval == 0 {
		interval = DefaultGroupFileInterval
	}
	log := w.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The first read sets the table again (a Set that changes nothing
	// tells no subscriber), so a change made before Run is not missed.
	var last []byte
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		b, err := os.ReadFile(w.Path)
		if err != nil {
			log.ErrorContext(ctx, "group file: read; the groups stay as they were", "path", w.Path, "error", err)
			continue
		}
		if bytes.Equal(b, last) {
			continue
		}
		var f GroupFile
		if err := json.Unmarshal(b, &f); err != nil {
			log.ErrorContext(ctx, "group file: parse; the groups stay as they were (want {\"namespaces\": {\"<ns>\": {\"<group>\": [\"<device>\"]}}})",
				"path", w.Path, "error", err)
			last = b
			continue
		}
		last = b
		w.Groups.Set(f.Namespaces)
		log.InfoContext(ctx, "group file read again", "path", w.Path)
	}
}
