package agent

import "time"

// SetStepHook makes the agent of o call f after each step of its monitor,
// with the time the step decided at.
func SetStepHook(o *Options, f func(now time.Time)) { o.stepHook = f }

// SetRebaseAfter sets how long a lower intent sequence read on a server
// the agent was never connected to must stay before the agent applies it
// (defaultRebaseAfter in production).
func SetRebaseAfter(o *Options, d time.Duration) { o.rebaseAfter = d }
