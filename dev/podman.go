package dev

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
)

// Runtime choices of Options.Runtime.
const (
	// RuntimeAuto uses Podman when a Podman API socket answers (and has the
	// base image), otherwise the simulated runtime.
	RuntimeAuto = "auto"
	// RuntimePodman requires Podman: fleet dev fails when no socket
	// answers.
	RuntimePodman = "podman"
	// RuntimeSim runs only simulated devices.
	RuntimeSim = "sim"
)

// PodmanDevice is the id of the one device whose agent drives real Podman.
// Only one: the agent names a container exactly as the score does and
// publishes the score's host ports, so two devices on one engine running the
// same Deployment would collide on container names and ports. A second
// fleet dev on the same engine (another data folder) names its Podman
// device podman-2 (claimPodmanDevice).
const PodmanDevice = "podman-1"

// BaseImage is the image the example images are built FROM: busybox-static
// imported by `task setup:podman` (nothing is pulled from the internet).
const BaseImage = "localhost/fleet-base:latest"

// SetupPodmanCommand installs Podman, imports BaseImage and starts the API
// service on <repository>/.cache/run/podman.sock.
const SetupPodmanCommand = "go tool -modfile=tools/go.mod task setup:podman"

// ExampleImage is a local image the examples use, built FROM BaseImage on the
// first run with Podman.
type ExampleImage struct {
	// Ref is the image reference the examples name.
	Ref string
	// Containerfile is the Containerfile's text after the FROM line.
	Containerfile string
}

// ExampleImages are the images of examples/*.yaml. The simulated runtime
// serves every image; on Podman they are built locally, so no example needs
// a registry or the network.
var ExampleImages = []ExampleImage{
	// The init container: it needs the database password (secret_env, from
	// the OpenBao stand-in) and records a migration in the shared volume.
	{Ref: "localhost/fleet-examples/analysis-migrate:v1", Containerfile: `CMD ["sh", "-c", "test -n \"$DB_PASSWORD\" || { echo 'DB_PASSWORD is not set' >&2; exit 2; }; echo \"migrated $(date -u +%FT%TZ)\" >> /data/migrations.log; cat /data/migrations.log"]` + "\n"},
	// The service: busybox httpd on 8080 serving the migration log. The
	// trap makes a stop immediate (httpd as PID 1 would ignore SIGTERM).
	// Without DB_PASSWORD it says so and exits with code 2
	// (examples/crashloop.yaml).
	{Ref: "localhost/fleet-examples/analysis-api:v1", Containerfile: `CMD ["sh", "-c", "trap 'exit 0' TERM INT; test -n \"$DB_PASSWORD\" || { echo 'fatal: DB_PASSWORD is not set' >&2; exit 2; }; echo \"analysis-api: connecting to the database with password $DB_PASSWORD\"; mkdir -p /www; cp /data/migrations.log /www/index.html; httpd -f -vv -p 8080 -h /www & wait"]` + "\n"},
	// The canary example's service: waits until stopped.
	{Ref: "localhost/fleet-examples/hello:v1", Containerfile: `CMD ["sh", "-c", "trap 'exit 0' TERM INT; echo \"hello from $HOSTNAME\"; sleep 2147483647 & wait"]` + "\n"},
}

// digest identifies the image's Containerfile (FROM line included).
func (im ExampleImage) digest() string {
	sum := sha256.Sum256([]byte("FROM " + BaseImage + "\n" + im.Containerfile))
	return hex.EncodeToString(sum[:8])
}

// podmanCandidates are the sockets tried, in order: the flag's when set,
// else the user's rootless socket ($XDG_RUNTIME_DIR/podman/podman.sock) and
// the one `task setup:podman` serves (<repository>/.cache/run/podman.sock).
func podmanCandidates(flag string) []string {
	if flag != "" {
		return []string{socketURI(flag)}
	}
	var out []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		out = append(out, socketURI(filepath.Join(d, "podman", "podman.sock")))
	}
	if root, err := repoRoot(); err == nil {
		out = append(out, socketURI(filepath.Join(root, ".cache", "run", "podman.sock")))
	}
	return out
}

// socketURI turns a socket path into a unix:// URI (a URI is kept).
func socketURI(s string) string {
	if strings.Contains(s, "://") {
		return s
	}
	return "unix://" + s
}

// chooseRuntime picks the devices' runtime from o.Runtime: the Podman
// engine (with the example images built) or none (simulated only, note says
// why).
func chooseRuntime(ctx context.Context, o Options) (eng *podmanEngine, note string, err error) {
	switch o.Runtime {
	case RuntimeSim:
		return nil, "--runtime sim", nil
	case RuntimePodman, RuntimeAuto:
	default:
		return nil, "", fmt.Errorf("fleet dev: --runtime %q: use auto, podman or sim", o.Runtime)
	}
	eng, err = findPodman(ctx, o.PodmanSocket)
	if err != nil {
		if o.Runtime == RuntimePodman {
			return nil, "", fmt.Errorf("fleet dev: --runtime podman: no usable Podman API socket (start one with `%s`, or pass --podman-socket): %w", SetupPodmanCommand, err)
		}
		o.Logger.Info("no usable Podman API socket: the devices are simulated", "reason", err)
		return nil, "no usable Podman API socket: " + strings.ReplaceAll(err.Error(), "\n", "; "), nil
	}
	o.Logger.Info("devices run on Podman", "socket", eng.uri)
	if err := eng.buildImages(ctx, o.Out, ExampleImages); err != nil {
		eng.close()
		return nil, "", fmt.Errorf("%w (or run with --runtime sim)", err)
	}
	// A rootless engine's containers write as the user: a folder of the
	// examples that root made (an earlier run as root) would fail their
	// rollouts. Said before the start, in the logs and the banner.
	if rootless, err := eng.rootless(ctx); err != nil {
		o.Logger.Warn("cannot tell whether the Podman engine is rootless: the examples' host folders are not checked", "socket", eng.uri, "err", err)
	} else if rootless {
		eng.folderNotes = exampleFolderNotes(ExampleHostFolders, writableByMe)
		for _, n := range eng.folderNotes {
			o.Logger.Warn(n, "socket", eng.uri)
		}
	}
	return eng, "", nil
}

// podmanEngine is the Podman service the Podman device uses.
type podmanEngine struct {
	uri  string
	rt   *podman.Runtime
	conn context.Context // bindings connection (image checks and builds)
	// folderNotes: the ExampleHostFolders a rootless engine cannot write
	// (exampleFolderNotes).
	folderNotes []string
}

// findPodman returns the first candidate socket whose service answers and
// has BaseImage, or why none is usable.
func findPodman(ctx context.Context, flag string) (*podmanEngine, error) {
	cands := podmanCandidates(flag)
	if len(cands) == 0 {
		return nil, errors.New("no Podman socket to try: pass --podman-socket")
	}
	var errs []error
	for _, uri := range cands {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		e, err := openPodman(cctx, uri)
		cancel()
		if err == nil {
			return e, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func openPodman(ctx context.Context, uri string) (*podmanEngine, error) {
	if path, ok := strings.CutPrefix(uri, "unix://"); ok {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s: %w", uri, err)
		}
	}
	rt, err := podman.New(ctx, podman.Options{URI: uri})
	if err != nil {
		return nil, fmt.Errorf("%s does not answer: %w", uri, err)
	}
	conn, err := bindings.NewConnection(ctx, uri)
	if err != nil {
		_ = rt.Close()
		return nil, fmt.Errorf("%s does not answer: %w", uri, err)
	}
	conn = context.WithoutCancel(conn)
	ok, err := images.Exists(conn, BaseImage, nil)
	if err == nil && !ok {
		err = fmt.Errorf("the base image %s is missing: run `%s`", BaseImage, SetupPodmanCommand)
	}
	if err != nil {
		_ = rt.Close()
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	return &podmanEngine{uri: uri, rt: rt, conn: conn}, nil
}

// labelExample holds the digest of an example image's Containerfile.
const labelExample = "io.nationtech.harmony-fleet.example"

// buildImages builds the example images FROM BaseImage, without the
// network, printing progress to out: those that are missing, and those
// built from another Containerfile (label labelExample).
func (e *podmanEngine) buildImages(ctx context.Context, out io.Writer, imgs []ExampleImage) error {
	for _, im := range imgs {
		ok, err := images.Exists(e.conn, im.Ref, nil)
		if err != nil {
			return fmt.Errorf("fleet dev: podman: image %s: %w", im.Ref, err)
		}
		if ok {
			rep, err := images.GetImage(e.conn, im.Ref, nil)
			if err != nil {
				return fmt.Errorf("fleet dev: podman: image %s: %w", im.Ref, err)
			}
			if rep.ImageData != nil && rep.Labels[labelExample] == im.digest() {
				continue
			}
		}
		began := time.Now()
		fmt.Fprintf(out, "podman: building %s FROM %s (missing or its Containerfile changed; no network) ...\n", im.Ref, BaseImage)
		if err := e.build(ctx, out, im); err != nil {
			return fmt.Errorf("fleet dev: podman: build %s: %w", im.Ref, err)
		}
		fmt.Fprintf(out, "podman: built %s in %s\n", im.Ref, time.Since(began).Round(time.Millisecond))
	}
	return nil
}

func (e *podmanEngine) build(ctx context.Context, out io.Writer, im ExampleImage) error {
	dir, err := os.MkdirTemp("", "fleet-dev-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "Containerfile")
	text := "FROM " + BaseImage + "\n" + im.Containerfile
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return err
	}
	var o types.BuildOptions
	o.ContextDirectory = dir
	o.Output = im.Ref
	// PullPolicy stays PullIfMissing: BaseImage is local, nothing is pulled.
	o.Labels = []string{labelExample + "=" + im.digest()}
	o.Out, o.Err, o.ReportWriter = indent{out}, indent{out}, indent{out}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	_, err = images.Build(mergeConn(bctx, e.conn), []string{file}, o)
	return err
}

// close releases the engine's connections.
func (e *podmanEngine) close() {
	if e != nil {
		_ = e.rt.Close()
	}
}

// mergeConn gives ctx's deadline and cancellation to a call on the bindings'
// connection (the bindings read the connection from context values).
func mergeConn(ctx, conn context.Context) context.Context {
	return connCtx{Context: ctx, conn: conn}
}

type connCtx struct {
	context.Context
	conn context.Context
}

func (c connCtx) Value(key any) any {
	if v := c.Context.Value(key); v != nil {
		return v
	}
	return c.conn.Value(key)
}

// indent prefixes build output so it reads as part of the step.
type indent struct{ w io.Writer }

func (i indent) Write(p []byte) (int, error) {
	s := strings.TrimRight(string(p), "\n")
	if s == "" {
		return len(p), nil
	}
	_, err := io.WriteString(i.w, "  | "+strings.ReplaceAll(s, "\n", "\n  | ")+"\n")
	return len(p), err
}
