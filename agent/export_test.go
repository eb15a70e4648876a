package agent

import "time"

// SetStepHook makes the agent of o call f after each step of its monitor,
// with the time the step decided at.
func SetStepHook(o *Options, f func(now time.Time)) { o.stepHook = f }
