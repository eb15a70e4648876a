package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/ulid/v2"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

const rolloutUsage = `usage: fleet rollout pause|resume|approve <namespace>/<name> [flags]
       fleet rollout simulate -f deployment.yaml | --recorded <namespace>/<name> (fleet rollout simulate -h)

Asks the operator to pause, resume or approve the rollout of a Deployment's
current generation (ADR 0016): writes the fleet.nationtech.io/rollout-action
annotation with your Kubernetes user name (from a SelfSubjectReview), the
Deployment's metadata.generation and a new request id. The API server's
admission policy checks the name and the generation (a request counts only
for the generation it is written at); the operator records the request
once, as rollout.paused, rollout.resumed or rollout.approved. docs/fleet.md.

  fleet rollout pause lab/analyzer
  fleet rollout approve lab/analyzer --batch 2

flags (anywhere after the action):
`

// runRollout is `fleet rollout`.
func runRollout(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return rolloutCmd(ctx, args, os.Stdout, os.Stderr)
}

// rolloutRequest is a validated `fleet rollout` command line.
type rolloutRequest struct {
	action          fleetv1.RolloutActionKind
	namespace, name string
	batch           int
	kubeconfig      string
	timeout         time.Duration
}

// parseRollout reads the action, the Deployment and the flags, in any order
// after the action.
func parseRollout(args []string, errOut io.Writer) (rolloutRequest, error) {
	var r rolloutRequest
	fs := flag.NewFlagSet("fleet rollout", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() { fmt.Fprint(errOut, rolloutUsage); fs.PrintDefaults() }
	fs.IntVar(&r.batch, "batch", 0, "approve: the number (1 or more) of the batch to approve; default: the one status.plan.awaitingApproval names")
	fs.StringVar(&r.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
	fs.DurationVar(&r.timeout, "timeout", 30*time.Second, "how long the Kubernetes requests may take")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fs.Usage()
			return r, flag.ErrHelp
		}
		fs.Usage()
		return r, errors.New("rollout: name an action: pause, resume or approve")
	}
	r.action = fleetv1.RolloutActionKind(args[0])
	switch r.action {
	case fleetv1.RolloutActionPause, fleetv1.RolloutActionResume, fleetv1.RolloutActionApprove:
	default:
		return r, fmt.Errorf("rollout: unknown action %q: use pause, resume or approve", args[0])
	}
	var positional []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return r, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(positional) != 1 {
		return r, fmt.Errorf("rollout %s: name one Deployment as <namespace>/<name> (got %d arguments)", r.action, len(positional))
	}
	ns, name, ok := strings.Cut(positional[0], "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return r, fmt.Errorf("rollout %s: %q is not <namespace>/<name>: name the Deployment as lab/analyzer", r.action, positional[0])
	}
	r.namespace, r.name = ns, name
	switch {
	case r.action == fleetv1.RolloutActionApprove && r.batch < 0:
		return r, errors.New("rollout approve: --batch must be 1 or more: batches are numbered from 1")
	case r.action != fleetv1.RolloutActionApprove && r.batch != 0:
		return r, fmt.Errorf("rollout %s: --batch is only for approve: remove it", r.action)
	}
	if r.timeout <= 0 {
		return r, errors.New("rollout: --timeout must be positive")
	}
	return r, nil
}

// rolloutCmd runs `fleet rollout` and prints what it requested to out.
func rolloutCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) > 0 && args[0] == "simulate" {
		return simulateCmd(ctx, args[1:], out, errOut, os.Getenv)
	}
	r, err := parseRollout(args, errOut)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cfg, err := restConfig(r.kubeconfig)
	if err != nil {
		return fmt.Errorf("rollout: --kubeconfig: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := authnv1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("rollout: Kubernetes client (--kubeconfig): %w", err)
	}
	a, err := requestRollout(ctx, c, r)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "requested %s of %s/%s generation %d", a.Action, r.namespace, r.name, a.Generation)
	if a.Batch > 0 {
		fmt.Fprintf(out, " batch %d", a.Batch)
	}
	fmt.Fprintf(out, " as %s (request %s)\n", a.By, a.Request)
	fmt.Fprintf(out, "the operator records it as rollout.%s; `kubectl describe deployments.fleet.nationtech.io -n %s %s` shows its Event, "+
		"`fleet history deployment %s/%s` the transition\n", pastTense(a.Action), r.namespace, r.name, r.namespace, r.name)
	return nil
}

// pastTense names the transition of an action.
func pastTense(a fleetv1.RolloutActionKind) string {
	switch a {
	case fleetv1.RolloutActionPause:
		return "paused"
	case fleetv1.RolloutActionResume:
		return "resumed"
	default:
		return "approved"
	}
}

// errNoBatchWaits: approve without --batch, and the status names no batch
// waiting for approval in the Deployment's generation.
var errNoBatchWaits = errors.New("no batch of the current generation waits for approval " +
	"(status.plan.awaitingApproval is not set): wait until it does, or name the batch with --batch")

// requestRollout learns the caller's user name, reads the Deployment's
// generation and writes the annotation with a new request id. The write is
// conditional on the Deployment's resourceVersion, so a generation that
// moves in between is read again rather than asked for stale.
func requestRollout(ctx context.Context, c client.Client, r rolloutRequest) (fleetv1.RolloutAction, error) {
	review := &authnv1.SelfSubjectReview{}
	if err := c.Create(ctx, review); err != nil {
		return fleetv1.RolloutAction{}, fmt.Errorf("rollout: learn your user name (SelfSubjectReview): %w", err)
	}
	user := review.Status.UserInfo.Username
	if user == "" {
		return fleetv1.RolloutAction{}, errors.New("rollout: the API server names no user for these credentials: use a kubeconfig of a user")
	}
	a := fleetv1.RolloutAction{Action: r.action, Batch: r.batch, By: user, Request: ulid.Make().String()}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d fleetv1.Deployment
		if err := c.Get(ctx, types.NamespacedName{Namespace: r.namespace, Name: r.name}, &d); err != nil {
			return err
		}
		// metadata.generation is the generation a revision is made for
		// (the operator's revision identity is UID + generation), and the
		// rollout the request controls is that revision's.
		a.Generation = d.Generation
		if a.Action == fleetv1.RolloutActionApprove && r.batch == 0 {
			// The batch the status says waits, if it describes this
			// generation.
			if d.Status.ObservedGeneration != d.Generation || d.Status.Plan == nil || d.Status.Plan.AwaitingApproval == 0 {
				return errNoBatchWaits
			}
			a.Batch = int(d.Status.Plan.AwaitingApproval)
		}
		value, err := a.Encode()
		if err != nil {
			return err
		}
		orig := d.DeepCopy()
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[fleetv1.AnnotationRolloutAction] = value
		return c.Patch(ctx, &d, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return a, fmt.Errorf("rollout %s %s/%s: %w", r.action, r.namespace, r.name, err)
	}
	return a, nil
}
