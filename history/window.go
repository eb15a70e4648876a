package history

import (
	"fmt"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// windowWaitText is what a timeline adds to report d, stored at stored,
// of a revision with a maintenance window handed to the device (ADR
// 0029): when the window it waits for opens, on the operator's clock, as
// the rollout projection believes it; "" when the report claims no wait
// the projection believes.
func windowWaitText(d events.WorkloadStatus, stored time.Time) string {
	at := projections.WindowOpening(d, stored)
	if at.IsZero() {
		return ""
	}
	return fmt.Sprintf("; waits for its maintenance window, which opens at %s", at.UTC().Format(time.RFC3339))
}
