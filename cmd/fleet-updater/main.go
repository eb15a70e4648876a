// Command fleet-updater is the root updater of a device: it serves the
// fixed maintenance operations (system-upgrade, agent-upgrade) to the
// fleet-agent user on a Unix socket. `fleet-updater client` asks it, as the
// agent would (for operators and tests). See docs/updater.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/updater"
)

// version is stamped at build time (-ldflags -X main.version=…).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "client" {
		err = client(ctx, os.Args[2:], os.Stdout)
	} else {
		err = run(ctx, os.Args[1:], os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-updater:", err)
		os.Exit(1)
	}
}

// flags are the daemon's command line.
type flags struct {
	socket, group, allowed, stateDir string
	aptGet, dpkg, dpkgQuery          string
	link, dir, restart               string
	lockTimeout, taskTimeout, health time.Duration
	maxSize                          int64
	version                          bool
}

// parse reads the daemon's command line.
func parse(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("fleet-updater", flag.ContinueOnError)
	fs.StringVar(&f.socket, "socket", updater.DefaultSocket, "Unix socket to serve")
	fs.StringVar(&f.group, "socket-group", "fleet-agent", "group of the socket (mode 0660), name or gid; empty: the daemon's (mode 0600)")
	fs.StringVar(&f.allowed, "allowed-user", "fleet-agent", "the only user (name or uid) that may talk to the updater: the agent's")
	fs.StringVar(&f.stateDir, "state-dir", updater.DefaultStateDir, "folder of the task records")
	fs.StringVar(&f.aptGet, "apt-get", "/usr/bin/apt-get", "apt-get binary")
	fs.StringVar(&f.dpkg, "dpkg", "/usr/bin/dpkg", "dpkg binary")
	fs.StringVar(&f.dpkgQuery, "dpkg-query", "/usr/bin/dpkg-query", "dpkg-query binary")
	fs.DurationVar(&f.lockTimeout, "dpkg-lock-timeout", 10*time.Minute, "how long apt waits for the dpkg lock")
	fs.DurationVar(&f.taskTimeout, "task-timeout", 2*time.Hour, "bound of one task")
	fs.StringVar(&f.link, "agent-link", "/usr/local/bin/fleet-agent", "the agent executable the unit runs (a symbolic link the updater switches)")
	fs.StringVar(&f.dir, "agent-dir", "/usr/local/lib/fleet-agent", "folder of the installed agent executables, fleet-agent-<version>")
	fs.StringVar(&f.restart, "restart-command", strings.Join(updater.DefaultRestartCommand, " "), "command that restarts the agent (split on spaces)")
	fs.DurationVar(&f.health, "health-timeout", 2*time.Minute, "how long a new agent has to report its version after its restart")
	fs.Int64Var(&f.maxSize, "max-agent-size", 256<<20, "largest agent download in bytes")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return flags{}, err
	}
	if fs.NArg() > 0 {
		return flags{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return f, nil
}

func run(ctx context.Context, args []string, logOut io.Writer) error {
	f, err := parse(args)
	if err != nil {
		return err
	}
	if f.version {
		fmt.Println(version)
		return nil
	}
	uid, err := lookupUID(f.allowed)
	if err != nil {
		return fmt.Errorf("--allowed-user: %w", err)
	}
	gid := -1
	if f.group != "" {
		if gid, err = lookupGID(f.group); err != nil {
			return fmt.Errorf("--socket-group: %w", err)
		}
	}
	argv := strings.Fields(f.restart)
	if len(argv) == 0 {
		return errors.New("--restart-command is empty: give the command that restarts the agent, e.g. systemctl restart fleet-agent")
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil)).With("version", version)
	return updater.Run(ctx, updater.Options{
		Socket: f.socket, SocketGID: gid, AllowedUID: uid, StateDir: f.stateDir, TaskTimeout: f.taskTimeout, Logger: logger,
		Apt: updater.Apt{AptGet: f.aptGet, Dpkg: f.dpkg, DpkgQuery: f.dpkgQuery, LockTimeout: f.lockTimeout},
		Agent: updater.AgentInstall{Link: f.link, Dir: f.dir, HealthTimeout: f.health, MaxSize: f.maxSize,
			Activator: updater.CommandActivator{Argv: argv}},
	})
}

func lookupUID(s string) (uint32, error) {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return uint32(n), nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, fmt.Errorf("%w (create the user, or give a uid)", err)
	}
	n, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(n), err
}

func lookupGID(s string) (int, error) {
	if n, err := strconv.Atoi(s); err == nil {
		return n, nil
	}
	g, err := user.LookupGroup(s)
	if err != nil {
		return 0, fmt.Errorf("%w (create the group, or give a gid)", err)
	}
	return strconv.Atoi(g.Gid)
}

// client sends one request and prints the response as JSON; with --wait it
// polls the task's status until it is done.
func client(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fleet-updater client", flag.ContinueOnError)
	socket := fs.String("socket", updater.DefaultSocket, "the updater's socket")
	op := fs.String("op", updater.OpStatus, "system-upgrade, agent-upgrade, status or hello")
	id := fs.String("id", "", "task id")
	url := fs.String("url", "", "agent-upgrade: the executable's URL")
	sum := fs.String("sha256", "", "agent-upgrade: its sha256")
	ver := fs.String("version", "", "agent-upgrade: the version it must report; hello: the agent's version")
	wait := fs.Duration("wait", 0, "poll the task until done, at most this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := updater.Client{Socket: *socket}
	req := updater.Request{ID: *id, Op: *op}
	switch *op {
	case updater.OpAgentUpgrade:
		req.Agent = &events.AgentArtifact{URL: *url, SHA256: *sum, Version: *ver}
	case updater.OpHello:
		req.Version = *ver
	}
	resp, err := c.Do(ctx, req)
	if err == nil && *wait > 0 && *op != updater.OpHello && !resp.Done() {
		wctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		resp, err = c.Wait(wctx, *id, 200*time.Millisecond)
	}
	b, _ := json.MarshalIndent(resp, "", "  ")
	fmt.Fprintln(out, string(b))
	return err
}
