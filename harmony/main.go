package harmony

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nationtech/harmony-fleet/harmony/internal/buildah"
	"github.com/nationtech/harmony-fleet/harmony/internal/cisecret"
	"github.com/nationtech/harmony-fleet/harmony/internal/rollout"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// KeyVariable is the one CI secret: the tenant's Zitadel machine key JSON.
const KeyVariable = cisecret.KeyVariable

// Exit statuses of the harmony command.
const (
	// ExitOK: shipped (and, with --wait, every frozen target converged).
	ExitOK = 0
	// ExitFailed: a build, push, apply, login or rollout failed.
	ExitFailed = 1
	// ExitUsage: the command line or the manifest is wrong.
	ExitUsage = 2
)

// DefaultWaitTimeout bounds --wait unless --wait-timeout says otherwise.
const DefaultWaitTimeout = 30 * time.Minute

// Main is the harmony command for app: an application's main function is
// `harmony.Main(app{})`. It runs the command line in os.Args and exits with
// Run's status; SIGINT and SIGTERM cancel it.
func Main(app HarmonyApp) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Run(ctx, app, Options{Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	os.Exit(code)
}

// Options are the process surroundings Run works in.
type Options struct {
	// Args are the command-line arguments without the program name.
	Args []string
	// Stdout receives the tag, the digests and rollout progress.
	Stdout io.Writer
	// Stderr receives errors and, with --verbose, the log.
	Stderr io.Writer
	// Getenv reads the environment: only KeyVariable and
	// SOURCE_DATE_EPOCH are read. Default os.Getenv.
	Getenv func(string) string
	// Logger, when set, receives the log instead of Stderr.
	Logger *slog.Logger

	// openStore makes the OpenBao client of a context (tests replace it).
	openStore func(OpenBao) (cisecret.Store, error)
	// waitInterval is the status poll interval. Default 1s.
	waitInterval time.Duration
}

// Run runs one harmony command and returns its exit status (ExitOK,
// ExitFailed, ExitUsage).
func Run(ctx context.Context, app HarmonyApp, o Options) int {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.openStore == nil {
		o.openStore = openBaoStore
	}
	err := run(ctx, app, o)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(o.Stderr, "harmony:", err)
	if errors.Is(err, ErrUsage) || errors.Is(err, ErrManifest) || errors.Is(err, ErrMutableTag) {
		return ExitUsage
	}
	return ExitFailed
}

const usage = `harmony ships this application to Fleet.

  harmony ship   --context C --tag T [--wait] [--wait-timeout D]
      build every image, push it, apply the Fleet Deployment pinned to the
      pushed digests, and with --wait follow its rollout
  harmony deploy --context C --tag T --image name=ref ... [--wait] [--wait-timeout D]
      apply the Fleet Deployment with existing images (digests or dev-* tags)

The only credential is the CI variable ` + KeyVariable + ` (see docs/ci.md).`

type imageFlag map[string]string

func (f imageFlag) String() string { return fmt.Sprint(map[string]string(f)) }

func (f imageFlag) Set(v string) error {
	name, ref, ok := strings.Cut(v, "=")
	if !ok || name == "" || ref == "" {
		return fmt.Errorf("want name=ref, got %q", v)
	}
	if _, dup := f[name]; dup {
		return fmt.Errorf("image %q given twice", name)
	}
	f[name] = ref
	return nil
}

type command struct {
	name        string
	context     string
	tag         string
	wait        bool
	waitTimeout time.Duration
	verbose     bool
	images      imageFlag
}

func parse(args []string, stderr io.Writer) (command, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return command{}, usageError("%s", usage)
	}
	c := command{name: args[0], images: imageFlag{}}
	if c.name != "ship" && c.name != "deploy" {
		return command{}, usageError("unknown command %q (there is no rollback: ship a repaired commit)\n\n%s", c.name, usage)
	}
	fs := flag.NewFlagSet("harmony "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.context, "context", "", "compiled deployment context to ship to")
	fs.StringVar(&c.tag, "tag", "", "release tag, normally the commit (\"$CI_COMMIT_SHA\")")
	fs.BoolVar(&c.wait, "wait", false, "wait for the rollout of the applied revision and fail if it fails")
	fs.DurationVar(&c.waitTimeout, "wait-timeout", DefaultWaitTimeout, "how long --wait waits")
	fs.BoolVar(&c.verbose, "verbose", false, "log each step to stderr")
	if c.name == "deploy" {
		fs.Var(c.images, "image", "name=ref of an existing image: repo@sha256:<digest> or repo:dev-<tag> (repeat per image)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		return command{}, usageError("%v", err)
	}
	if fs.NArg() > 0 {
		return command{}, usageError("unexpected argument %q", fs.Arg(0))
	}
	if err := validateTag(c.tag); err != nil {
		return command{}, err
	}
	if c.waitTimeout <= 0 {
		return command{}, usageError("--wait-timeout %s must be positive", c.waitTimeout)
	}
	return c, nil
}

func run(ctx context.Context, app HarmonyApp, o Options) error {
	c, err := parse(o.Args, o.Stderr)
	if err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		level := slog.LevelWarn
		if c.verbose {
			level = slog.LevelInfo
		}
		log = slog.New(slog.NewTextHandler(o.Stderr, &slog.HandlerOptions{Level: level}))
	}
	if err := validateApp(app); err != nil {
		return err
	}
	hc, err := selectContext(app, c.context)
	if err != nil {
		return err
	}
	if err := validateContext(hc, c.name == "ship"); err != nil {
		return err
	}
	refs := map[string]string{}
	if c.name == "deploy" {
		if refs, err = deployRefs(app, c.images); err != nil {
			return err
		}
	}

	if _, err := cisecret.ParseKey(o.Getenv(KeyVariable)); err != nil {
		return err
	}
	store, err := o.openStore(hc.OpenBao)
	if err != nil {
		return err
	}
	sess, err := cisecret.Open(ctx, cisecret.Options{
		KeyJSON: o.Getenv(KeyVariable), Issuer: hc.Zitadel.URL, Audience: hc.Zitadel.ProjectID,
		Store: store, HTTPClient: &http.Client{Timeout: 30 * time.Second}, Logger: log,
	})
	if err != nil {
		return err
	}
	kubeconfig, err := sess.Kubeconfig(ctx, hc.OpenBao.Kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubeClient(kubeconfig)
	if err != nil {
		return fmt.Errorf("%w (OpenBao %s)", err, hc.OpenBao.Kubeconfig)
	}

	fmt.Fprintf(o.Stdout, "tag %s\n", c.tag)
	key, err := signingKey(ctx, sess, &hc)
	if err != nil {
		return err
	}
	if c.name == "ship" {
		creds, err := sess.RegistryCredentials(ctx, hc.OpenBao.RegistryCredentials, hc.Registry)
		if err != nil {
			return err
		}
		if refs, err = publish(ctx, app, hc, c.tag, creds, key, sourceDateEpoch(o.Getenv), log); err != nil {
			return err
		}
	}
	for _, name := range usedImages(app.Deployment()) {
		fmt.Fprintf(o.Stdout, "image %s %s\n", name, refs[name])
	}

	d := fleetDeployment(app, hc, c.tag, refs)
	applied, err := rollout.Apply(ctx, kube, d)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "applied Deployment %s/%s uid %s generation %d\n", applied.Namespace, applied.Name, applied.UID, applied.Generation)
	if !c.wait {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, c.waitTimeout)
	defer cancel()
	st, err := rollout.Wait(wctx, kube, applied, rollout.WaitOptions{
		Interval: o.waitInterval,
		Logger:   log,
		Progress: func(st fleetv1.DeploymentStatus) {
			fmt.Fprintf(o.Stdout, "rollout generation %d %s\n", applied.Generation, rollout.Summary(st))
		},
		PullSecretPolicy: func(c metav1.Condition) {
			fmt.Fprintf(o.Stdout, "rollout generation %d %s\n", applied.Generation, rollout.PolicySummary(c))
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(o.Stdout, "rollout generation %d succeeded: %d of %d targets converged%s\n", applied.Generation, st.Counts.Succeeded, st.Counts.Total, rollout.CanaryStage(st))
	return nil
}

// deployRefs checks deploy's --image flags: one per image the Deployment
// uses, each a digest or a dev-* tag.
func deployRefs(app HarmonyApp, given imageFlag) (map[string]string, error) {
	used := usedImages(app.Deployment())
	want := map[string]bool{}
	for _, n := range used {
		want[n] = true
	}
	for name, ref := range given {
		if !want[name] {
			return nil, usageError("--image %s=…: the Deployment uses no image %q (it uses %s)", name, name, strings.Join(used, ", "))
		}
		if err := checkDeployRef(name, ref); err != nil {
			return nil, err
		}
	}
	for _, n := range used {
		if _, ok := given[n]; !ok {
			return nil, usageError("--image %s=<ref> is missing: give every image the Deployment uses (%s)", n, strings.Join(used, ", "))
		}
	}
	return map[string]string(given), nil
}

// publish builds and pushes every declared image (validateApp made sure the
// Deployment uses each), signs each pushed digest when key is set (sign),
// and returns name →
// <registry>/<repository>/<name>@<digest>. The registry credentials live in
// a temporary directory removed before it returns.
func publish(ctx context.Context, app HarmonyApp, hc Context, tag string, creds cisecret.RegistryCredentials, key *imageSigner, epoch int64, log *slog.Logger) (map[string]string, error) {
	auth, err := buildah.NewAuthDir(hc.Registry, creds.Username, creds.Password)
	if err != nil {
		return nil, err
	}
	defer auth.Close()
	tool := buildah.Tool{Auth: auth, Timestamp: epoch}
	refs := map[string]string{}
	for _, im := range app.Images() {
		name := im.Name
		repo := imageRepository(hc, name)
		ref := repo + ":" + tag
		start := time.Now()
		if err := tool.Build(ctx, ref, dockerfile(im), im.Context); err != nil {
			return nil, err
		}
		log.InfoContext(ctx, "image built", "image", name, "ref", ref, "took", time.Since(start).Round(time.Millisecond))
		start = time.Now()
		digest, err := tool.Push(ctx, ref)
		if err != nil {
			return nil, err
		}
		log.InfoContext(ctx, "image pushed", "image", name, "digest", digest, "took", time.Since(start).Round(time.Millisecond))
		if err := tool.Remove(ctx, ref); err != nil {
			log.WarnContext(ctx, "local build not removed", "ref", ref, "err", err)
		}
		if key != nil {
			if err := sign(ctx, repo+"@"+digest, ref, creds, *key, log); err != nil {
				return nil, err
			}
		}
		refs[name] = repo + "@" + digest
	}
	return refs, nil
}

// sourceDateEpoch is SOURCE_DATE_EPOCH (the reproducible-builds
// convention) or 0: the created time of every built image.
func sourceDateEpoch(getenv func(string) string) int64 {
	if v, err := strconv.ParseInt(getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil && v >= 0 {
		return v
	}
	return 0
}

// kubeClient is a dynamic client from a kubeconfig held in memory.
func kubeClient(kubeconfig []byte) (dynamic.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		// The parser may quote the document: never wrap its error.
		return nil, errors.New("the cluster access is not a valid kubeconfig")
	}
	cfg.UserAgent = "harmony"
	cl, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	return cl, nil
}
