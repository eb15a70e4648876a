package updater

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Activator restarts the agent so that it runs the executable its link
// points to.
type Activator interface {
	Activate(ctx context.Context) error
}

// CommandActivator runs a fixed command (from the daemon's flags) to
// restart the agent; the default is systemctl restart fleet-agent.
type CommandActivator struct {
	Argv []string
}

// DefaultRestartCommand is the command CommandActivator runs by default.
var DefaultRestartCommand = []string{"systemctl", "restart", "fleet-agent"}

// Activate implements Activator.
func (c CommandActivator) Activate(ctx context.Context) error {
	argv := c.Argv
	if len(argv) == 0 {
		argv = DefaultRestartCommand
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = aptEnv
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("restart the agent (%s): %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(tailString(out, 512)))
	}
	return nil
}

func tailString(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// AgentInstall configures agent-upgrade. Every path is the daemon's own.
type AgentInstall struct {
	// Link is the executable the agent's unit runs, a symbolic link the
	// updater switches atomically (default /usr/local/bin/fleet-agent). A
	// regular file found there is kept as Dir/fleet-agent-installed.
	Link string
	// Dir holds the versioned executables, fleet-agent-<version> (default
	// /usr/local/lib/fleet-agent).
	Dir string
	// MaxSize bounds a download (default 256 MiB).
	MaxSize int64
	// DownloadTimeout bounds a download (default 5 minutes).
	DownloadTimeout time.Duration
	// HealthTimeout is how long the new agent has to say hello with the
	// expected version after its restart (default 2 minutes).
	HealthTimeout time.Duration
	// Activator restarts the agent (default CommandActivator with
	// DefaultRestartCommand).
	Activator Activator
	// HTTPClient downloads (default: one with DownloadTimeout).
	HTTPClient *http.Client
}

func (a AgentInstall) withDefaults() AgentInstall {
	if a.Link == "" {
		a.Link = "/usr/local/bin/fleet-agent"
	}
	if a.Dir == "" {
		a.Dir = "/usr/local/lib/fleet-agent"
	}
	if a.MaxSize <= 0 {
		a.MaxSize = 256 << 20
	}
	if a.DownloadTimeout <= 0 {
		a.DownloadTimeout = 5 * time.Minute
	}
	if a.HealthTimeout <= 0 {
		a.HealthTimeout = 2 * time.Minute
	}
	if a.Activator == nil {
		a.Activator = CommandActivator{}
	}
	if a.HTTPClient == nil {
		a.HTTPClient = &http.Client{Timeout: a.DownloadTimeout}
	}
	return a
}

// helloWaiter waits for the agent's hello after an activation.
type helloWaiter interface {
	// mark returns the current hello sequence.
	mark() uint64
	// wait returns the version of the first hello after seq that says
	// want (ok), or, at the timeout, the last version heard after seq.
	wait(ctx context.Context, seq uint64, want string, timeout time.Duration) (got string, ok bool)
}

// upgradeAgent installs and activates art; rec receives the previous
// executable (persisted before the switch), out the steps. It returns the
// version the running agent reported.
func (a AgentInstall) upgradeAgent(ctx context.Context, art events.AgentArtifact, out io.Writer, hw helloWaiter, savePrevious func(string) error) (string, error) {
	a = a.withDefaults()
	if err := os.MkdirAll(a.Dir, 0o755); err != nil {
		return "", fmt.Errorf("agent folder: %w", err)
	}
	target := filepath.Join(a.Dir, "fleet-agent-"+art.Version)
	fmt.Fprintf(out, "downloading %s\n", art.URL)
	if err := a.download(ctx, art, target); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "sha256 verified; installed %s\n", target)
	prev, err := a.previous()
	if err != nil {
		return "", err
	}
	if err := savePrevious(prev); err != nil {
		return "", err
	}
	if err := switchLink(a.Link, target); err != nil {
		return "", err
	}
	fmt.Fprintf(out, "%s -> %s (previous: %s)\n", a.Link, target, cmpOr(prev, "none"))
	seq := hw.mark()
	err = a.Activator.Activate(ctx)
	var got string
	if err == nil {
		fmt.Fprintf(out, "agent restarted; waiting up to %s for it to report version %s\n", a.HealthTimeout, art.Version)
		var ok bool
		if got, ok = hw.wait(ctx, seq, art.Version, a.HealthTimeout); ok {
			fmt.Fprintf(out, "the agent reports version %s\n", got)
			return got, nil
		}
		err = fmt.Errorf("%w: expected %s within %s, heard %q", ErrUnhealthy, art.Version, a.HealthTimeout, got)
	}
	fmt.Fprintf(out, "activation failed: %v\n", err)
	if ctx.Err() != nil {
		// The updater stops: point the link back (the agent's next start
		// runs the previous executable, as the failed task says); no
		// restart now.
		if prev != "" {
			if rerr := switchLink(a.Link, prev); rerr != nil {
				return "", fmt.Errorf("%w; restoring %s failed: %w", err, prev, rerr)
			}
			return "", fmt.Errorf("%w; %s points at the previous executable %s again (the agent was not restarted)", err, a.Link, prev)
		}
		return "", err
	}
	if prev == "" {
		return "", fmt.Errorf("%w; no previous executable to restore", err)
	}
	if rerr := switchLink(a.Link, prev); rerr != nil {
		return "", fmt.Errorf("%w; restoring %s failed: %w", err, prev, rerr)
	}
	fmt.Fprintf(out, "restored %s -> %s\n", a.Link, prev)
	seq = hw.mark()
	if rerr := a.Activator.Activate(ctx); rerr != nil {
		return "", fmt.Errorf("%w; restored %s but restarting it failed: %w", err, prev, rerr)
	}
	restored, _ := hw.wait(ctx, seq, "", a.HealthTimeout)
	fmt.Fprintf(out, "the restored agent reports version %q\n", restored)
	return restored, fmt.Errorf("%w; restored the previous executable %s", err, prev)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// download fetches art into target (through a temporary file in the same
// folder), bounded by MaxSize, and checks its sha256 before it is renamed
// into place.
func (a AgentInstall) download(ctx context.Context, art events.AgentArtifact, target string) error {
	ctx, cancel := context.WithTimeout(ctx, a.DownloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, art.URL, nil)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	resp, err := a.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download: the server answered %s", resp.Status)
	}
	f, err := os.CreateTemp(a.Dir, ".download-*")
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	defer func() { _ = os.Remove(f.Name()) }()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(resp.Body, a.MaxSize+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download: %w", err)
	}
	if n > a.MaxSize {
		return fmt.Errorf("download: larger than %d bytes", a.MaxSize)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != art.SHA256 {
		return fmt.Errorf("%w: the download's is %s, the task names %s", ErrChecksum, got, art.SHA256)
	}
	if err := os.Chmod(f.Name(), 0o755); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	if err := os.Rename(f.Name(), target); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	return nil
}

// previous returns the executable the link runs now: its target, or, when
// a regular file is there, that file moved to Dir/fleet-agent-installed
// and linked; "" when there is none.
func (a AgentInstall) previous() (string, error) {
	fi, err := os.Lstat(a.Link)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("agent executable: %w", err)
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(a.Link)
		if err != nil {
			return "", fmt.Errorf("agent executable: %w", err)
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(a.Link), t)
		}
		return t, nil
	case fi.Mode().IsRegular():
		kept := filepath.Join(a.Dir, "fleet-agent-installed")
		if err := copyFile(a.Link, kept); err != nil {
			return "", fmt.Errorf("keep the installed agent: %w", err)
		}
		return kept, nil
	}
	return "", fmt.Errorf("agent executable %s is neither a file nor a link", a.Link)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	f, err := os.CreateTemp(filepath.Dir(to), ".copy-*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := io.Copy(f, in); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(0o755); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), to)
}

// restore points the link back at prev when it points elsewhere and
// restarts the agent: after an agent-upgrade the updater was stopped in.
func (a AgentInstall) restore(ctx context.Context, prev string) (string, error) {
	a = a.withDefaults()
	if cur, err := os.Readlink(a.Link); err == nil && cur == prev {
		return fmt.Sprintf("%s points at the previous executable %s", a.Link, prev), nil
	}
	if err := switchLink(a.Link, prev); err != nil {
		return "", err
	}
	if err := a.Activator.Activate(ctx); err != nil {
		return "", fmt.Errorf("restored %s -> %s but restarting the agent failed: %w", a.Link, prev, err)
	}
	return fmt.Sprintf("restored %s -> %s and restarted the agent", a.Link, prev), nil
}

// switchLink points link at target atomically (a new link renamed over the
// old one).
func switchLink(link, target string) error {
	tmp := filepath.Join(filepath.Dir(link), "."+filepath.Base(link)+".new")
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("switch %s: %w", link, err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("switch %s: %w", link, err)
	}
	return nil
}
