// Package followers is the operator's followers watch (ADR 0026): it judges
// every Device change against the Follow Deployments of its namespace, from
// the informer cache, and tells the rollout runner (operator/rollouts) which
// devices came to match or stopped matching (operator/internal/follow). The
// runner decides and appends the transition; this package writes nothing.
package followers
