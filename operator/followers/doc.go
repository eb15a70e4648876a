// Package followers is the operator's followers watch (ADR 0026): it judges
// every Device change, and every group membership change a GroupWatcher
// source reports, against the Follow Deployments of its namespace, from
// the informer cache, and tells the rollout runner (operator/rollouts) which
// devices came to match or stopped matching (operator/internal/follow). It
// remembers what it sent per Deployment and Device, and forgets a
// Deployment deleted or no longer following. The runner decides and
// appends the transition; this package writes nothing.
package followers
