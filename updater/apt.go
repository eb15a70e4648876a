package updater

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Apt runs the system-upgrade. Its commands and arguments are fixed here;
// only the binaries' paths are configurable, by the daemon's own flags
// (for tests), never by a request.
type Apt struct {
	// AptGet, Dpkg and DpkgQuery are the binaries (defaults
	// /usr/bin/apt-get, /usr/bin/dpkg, /usr/bin/dpkg-query).
	AptGet, Dpkg, DpkgQuery string
	// LockTimeout is how long apt waits for the dpkg lock another process
	// holds (default 10 minutes).
	LockTimeout time.Duration
}

func (a Apt) withDefaults() Apt {
	if a.AptGet == "" {
		a.AptGet = "/usr/bin/apt-get"
	}
	if a.Dpkg == "" {
		a.Dpkg = "/usr/bin/dpkg"
	}
	if a.DpkgQuery == "" {
		a.DpkgQuery = "/usr/bin/dpkg-query"
	}
	if a.LockTimeout <= 0 {
		a.LockTimeout = 10 * time.Minute
	}
	return a
}

// aptEnv is the whole environment of the commands: nothing of the daemon's
// or the caller's.
var aptEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"DEBIAN_FRONTEND=noninteractive",
	"APT_LISTCHANGES_FRONTEND=none",
	"NEEDRESTART_MODE=a",
	"LC_ALL=C.UTF-8",
	"HOME=/root",
}

// SystemUpgrade repairs an interrupted dpkg (dpkg --configure -a), runs
// apt-get update and apt-get -y full-upgrade keeping existing configuration
// files, and returns the packages that changed (from dpkg-query before and
// after). Output goes to out.
func (a Apt) SystemUpgrade(ctx context.Context, out io.Writer) ([]events.PackageChange, error) {
	a = a.withDefaults()
	before, err := a.installed(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.repair(ctx, out); err != nil {
		return nil, err
	}
	lock := "DPkg::Lock::Timeout=" + strconv.Itoa(int(a.LockTimeout.Seconds()))
	steps := [][]string{
		{a.AptGet, "-o", lock, "update"},
		{a.AptGet, "-y", "-o", lock, "-o", "Dpkg::Options::=--force-confold", "-o", "Dpkg::Options::=--force-confdef", "full-upgrade"},
	}
	for _, argv := range steps {
		if err := run(ctx, out, argv); err != nil {
			return nil, err
		}
	}
	after, err := a.installed(ctx)
	if err != nil {
		return nil, err
	}
	return diffPackages(before, after), nil
}

// repair finishes what an interrupted dpkg left half done (dpkg
// --configure -a). dpkg has no lock timeout of its own: while another
// process holds the dpkg lock it is tried again, with a growing delay, for
// up to LockTimeout.
func (a Apt) repair(ctx context.Context, out io.Writer) error {
	argv := []string{a.Dpkg, "--force-confold", "--force-confdef", "--configure", "-a"}
	deadline := time.Now().Add(a.LockTimeout)
	wait := time.Second
	for {
		var attempt tailBuffer
		attempt.max = 4 << 10
		err := run(ctx, io.MultiWriter(out, &attempt), argv)
		if err == nil || ctx.Err() != nil || !strings.Contains(attempt.String(), "lock") || time.Now().After(deadline) {
			return err
		}
		fmt.Fprintf(out, "dpkg is locked by another process; trying again in %s\n", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 15*time.Second)
	}
}

// run runs one fixed command with aptEnv, its output to out.
func run(ctx context.Context, out io.Writer, argv []string) error {
	fmt.Fprintf(out, "$ %s\n", strings.Join(argv, " "))
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = aptEnv
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// installed returns package → version of the installed packages.
func (a Apt) installed(ctx context.Context) (map[string]string, error) {
	var buf bytes.Buffer
	cmd := exec.CommandContext(ctx, a.DpkgQuery, "-W", "-f", `${binary:Package}\t${Version}\t${db:Status-Abbrev}\n`)
	cmd.Env = aptEnv
	cmd.Stdout = &buf
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("dpkg-query -W: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return parseInstalled(&buf), nil
}

// parseInstalled reads dpkg-query lines "package\tversion\tstatus": a
// package counts as installed unless its status says not-installed or
// config-files only.
func parseInstalled(r io.Reader) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 || f[0] == "" {
			continue
		}
		st := f[2]
		if len(st) >= 2 && (st[1] == 'n' || st[1] == 'c') {
			continue
		}
		m[f[0]] = f[1]
	}
	return m
}

// diffPackages returns the changes from before to after, sorted by package.
func diffPackages(before, after map[string]string) []events.PackageChange {
	var out []events.PackageChange
	for p, v := range after {
		if w, ok := before[p]; !ok || w != v {
			out = append(out, events.PackageChange{Package: p, From: w, To: v})
		}
	}
	for p, w := range before {
		if _, ok := after[p]; !ok {
			out = append(out, events.PackageChange{Package: p, From: w})
		}
	}
	slices.SortFunc(out, func(a, b events.PackageChange) int { return strings.Compare(a.Package, b.Package) })
	return out
}
