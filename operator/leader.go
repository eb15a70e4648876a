package operator

import (
	"errors"
	"fmt"
	"time"
)

// LeaseName is the name of the coordination.k8s.io Lease the operator
// replicas elect their leader with, in LeaderElection.Namespace.
const LeaseName = "fleet-operator"

// Defaults of LeaderElection (controller-runtime's and kube-controller-manager's).
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// retryJitter is client-go's leaderelection.JitterFactor: a replica that
// does not lead tries the Lease again every RetryPeriod to
// (1+retryJitter)·RetryPeriod, and the renew deadline must exceed
// retryJitter·RetryPeriod.
const retryJitter = 1.2

// LeaderElection makes the operator one of several replicas of which only
// the holder of the Lease LeaseName runs the controllers, the rollout and
// TaskRun runners and the telemetry consumer; the others keep their caches
// warm and serve metrics and health. The zero value is disabled: one
// operator, leading from the start (fleet dev, tests, embedded uses).
type LeaderElection struct {
	// Enabled turns leader election on.
	Enabled bool
	// Namespace holds the Lease; "": the namespace of the operator's
	// service account when it runs in a cluster (outside one it is
	// required).
	Namespace string
	// LeaseDuration is how long a Lease that is not renewed keeps the
	// other replicas waiting: whole seconds (the Lease stores seconds), at
	// least 1s and longer than RenewDeadline. 0: DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline is how long the leader keeps trying to renew before it
	// stops leading (and the process exits); longer than 1.2·RetryPeriod.
	// 0: DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is how often the leader renews and the others try to
	// acquire. 0: DefaultRetryPeriod.
	RetryPeriod time.Duration
}

// WithDefaults fills the zero durations with the defaults.
func (l LeaderElection) WithDefaults() LeaderElection {
	if l.LeaseDuration == 0 {
		l.LeaseDuration = DefaultLeaseDuration
	}
	if l.RenewDeadline == 0 {
		l.RenewDeadline = DefaultRenewDeadline
	}
	if l.RetryPeriod == 0 {
		l.RetryPeriod = DefaultRetryPeriod
	}
	return l
}

// Validate checks the bounds of the durations (after WithDefaults); a
// disabled election is always valid.
func (l LeaderElection) Validate() error {
	if !l.Enabled {
		return nil
	}
	l = l.WithDefaults()
	var errs []error
	switch {
	case l.LeaseDuration < time.Second || l.LeaseDuration%time.Second != 0:
		errs = append(errs, fmt.Errorf("operator: lease duration %s: use whole seconds, at least 1s (default %s)", l.LeaseDuration, DefaultLeaseDuration))
	case l.LeaseDuration <= l.RenewDeadline:
		errs = append(errs, fmt.Errorf("operator: lease duration %s must be longer than the renew deadline %s, or a follower could lead while the old leader still does", l.LeaseDuration, l.RenewDeadline))
	}
	if l.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("operator: retry period %s: use a positive duration (default %s)", l.RetryPeriod, DefaultRetryPeriod))
	} else if float64(l.RenewDeadline) <= retryJitter*float64(l.RetryPeriod) {
		errs = append(errs, fmt.Errorf("operator: renew deadline %s must be longer than 1.2 × the retry period %s", l.RenewDeadline, l.RetryPeriod))
	}
	return errors.Join(errs...)
}

// TakeoverBound is the longest a follower takes to lead after the leader
// died without releasing the Lease (SIGKILL, a lost node), not counting the
// Kubernetes API's own latency: the follower notices the leader's last
// renewal at its next try, at most (1+1.2)·RetryPeriod later, waits
// LeaseDuration from then, and acquires at the try after that, at most
// another (1+1.2)·RetryPeriod later. A leader that stops cleanly releases
// the Lease, and a follower leads within (1+1.2)·RetryPeriod.
func (l LeaderElection) TakeoverBound() time.Duration {
	l = l.WithDefaults()
	return l.LeaseDuration + time.Duration(2*(1+retryJitter)*float64(l.RetryPeriod))
}
