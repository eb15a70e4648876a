package operator

import "github.com/nationtech/harmony-fleet/operator/internal/kstatus"

// The status writers the roles still in this package share (package
// kstatus).
var (
	applyStatus   = kstatus.Apply
	ownConditions = kstatus.OwnConditions
)
