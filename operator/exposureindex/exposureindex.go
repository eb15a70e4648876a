// Package exposureindex is the operator's exposure index role (ADR 0033):
// on the elected replica only, it keeps the exposure index stream
// (events.StreamIndex) up to date with the devices' workload and health
// reports, through history.ExposureIndexWriter, resuming after a restart
// or a failover from the last record the index holds. `fleet history
// exposure` reads it; the index is derived, and deleting its stream only
// makes this role write it again from the reports.
package exposureindex

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
)

// ErrInvalidOptions is wrapped by Runner.Validate.
var ErrInvalidOptions = errors.New("invalid exposure index options")

// Runner keeps the exposure index while the operator leads.
type Runner struct {
	// Store reads the reports and the index and appends to it (an
	// *events.Store). Required.
	Store history.IndexStore
	// Log: default discard.
	Log *slog.Logger
	// Skips counts the reports skipped because they do not decode
	// (nil-safe).
	Skips *events.SkipCounter
	// RetryMin is the first wait before the writer starts over after a
	// failure; default one second.
	RetryMin time.Duration
}

// Validate checks the options.
func (r *Runner) Validate() error {
	if r.Store == nil {
		return fmt.Errorf("%w: Store is nil: pass the operator's *events.Store", ErrInvalidOptions)
	}
	if r.RetryMin < 0 {
		return fmt.Errorf("%w: RetryMin is %s: use 0 (one second) or a positive duration", ErrInvalidOptions, r.RetryMin)
	}
	return nil
}

// Run keeps the index until ctx ends; it returns nil then.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &history.ExposureIndexWriter{Store: r.Store, Log: log, Skips: r.Skips, RetryMin: r.RetryMin}
	if err := w.Run(ctx); err != nil {
		return fmt.Errorf("exposure index: %w", err)
	}
	return nil
}
