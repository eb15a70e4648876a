package updater

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nationtech/harmony-fleet/events"
)

// Default paths of the daemon.
const (
	DefaultSocket   = "/run/fleet-updater/updater.sock"
	DefaultStateDir = "/var/lib/fleet-updater"
)

// Options configure the updater daemon.
type Options struct {
	// Socket is the Unix socket path (default DefaultSocket); its folder
	// is made when missing.
	Socket string
	// SocketGID is the socket's group (mode 0660), the agent's group; -1
	// leaves it the daemon's (mode 0600 then).
	SocketGID int
	// AllowedUID is the only uid that may talk to the updater (the
	// agent's).
	AllowedUID uint32
	// StateDir holds the task records, tasks/<id>.json (default
	// DefaultStateDir).
	StateDir string
	// Apt runs system-upgrade.
	Apt Apt
	// Agent configures agent-upgrade.
	Agent AgentInstall
	// TaskTimeout bounds one task (default 2 hours).
	TaskTimeout time.Duration
	// Logger receives the daemon's log (task ids, operations, phases,
	// refused peers, at most one line per 10 s; never a request's body).
	// Nil: discarded.
	Logger *slog.Logger
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.AllowedUID == 0 && os.Getuid() != 0 {
		errs = append(errs, errors.New("updater: the allowed uid is 0 but the daemon is not root"))
	}
	if o.SocketGID < -1 {
		errs = append(errs, fmt.Errorf("updater: socket group %d", o.SocketGID))
	}
	for _, p := range []struct{ name, path string }{{"socket", o.Socket}, {"state folder", o.StateDir}, {"agent link", o.Agent.Link}, {"agent folder", o.Agent.Dir}} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			errs = append(errs, fmt.Errorf("updater: the %s %q must be an absolute path", p.name, p.path))
		}
	}
	return errors.Join(errs...)
}

// server is one running updater.
type server struct {
	o     Options
	log   *slog.Logger
	store *store

	mu  sync.Mutex // guards cur and the hello fields
	cur *running   // the task running, nil when idle
	// helloSeq counts hellos; helloVersion is the last one's version;
	// helloCh is closed (and replaced) at each.
	helloSeq     uint64
	helloVersion string
	helloCh      chan struct{}
}

// running is the task in progress.
type running struct {
	rec Record
	out *tailBuffer
}

// Run serves the socket until ctx ends. On start it reports every task a
// previous run was stopped in as failed (ErrInterrupted), never running it
// again. A task running when ctx ends is stopped and recorded failed; Run
// returns after it and every connection are done.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Socket == "" {
		o.Socket = DefaultSocket
	}
	if o.StateDir == "" {
		o.StateDir = DefaultStateDir
	}
	if o.TaskTimeout <= 0 {
		o.TaskTimeout = 2 * time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	st, err := newStore(o.StateDir)
	if err != nil {
		return fmt.Errorf("updater: %w", err)
	}
	s := &server{o: o, log: o.Logger, store: st, helloCh: make(chan struct{})}
	if err := s.recover(); err != nil {
		return fmt.Errorf("updater: %w", err)
	}
	ln, err := listen(o.Socket, o.SocketGID)
	if err != nil {
		return fmt.Errorf("updater: %w", err)
	}
	s.log.InfoContext(ctx, "serving", "socket", o.Socket, "allowedUID", o.AllowedUID)

	var wg sync.WaitGroup
	tctx, cancelTasks := context.WithCancel(context.Background())
	defer cancelTasks()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	slots := make(chan struct{}, maxConnections)
	var refusals refusalLog
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				s.log.ErrorContext(ctx, "accept", "error", err)
			}
			break
		}
		// The peer is checked before it takes a slot: a refused peer is
		// answered and closed here, at once, and never waited for.
		if err := checkPeer(c, s.o.AllowedUID); err != nil {
			refuse(c, err)
			refusals.note(s.log, err, time.Now())
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			s.log.Warn("connection dropped: too many open connections", "max", maxConnections)
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			s.serve(tctx, &wg, c)
		})
	}
	refusals.flush(s.log)
	cancelTasks()
	wg.Wait()
	_ = os.Remove(o.Socket)
	return nil
}

// listen makes the socket: its folder (0755 when missing), a stale socket
// removed, mode 0660 with group gid (0600 when gid is -1).
func listen(path string, gid int) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket folder: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		_ = os.Remove(path)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	mode := os.FileMode(0o600)
	if gid >= 0 {
		mode = 0o660
		if err := os.Chown(path, -1, gid); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("socket group: %w", err)
		}
	}
	if err := os.Chmod(path, mode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("socket mode: %w", err)
	}
	return ln, nil
}

// recover records every task still marked running as failed: the updater
// stopped while it ran.
func (s *server) recover() error {
	recs, err := s.store.running()
	if err != nil {
		return err
	}
	for _, r := range recs {
		r.Phase, r.Error, r.Finished = events.TaskFailed, ErrInterrupted.Error(), time.Now().UTC()
		if r.Op == OpSystemUpgrade {
			r.Error += " (the next system-upgrade repairs dpkg first: dpkg --configure -a)"
		}
		if r.Op == OpAgentUpgrade && r.Previous != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			msg, err := s.o.Agent.restore(ctx, r.Previous)
			cancel()
			if err != nil {
				msg = "the previous agent executable was not restored: " + err.Error()
			}
			r.Error += " (" + msg + ")"
		}
		if err := s.store.put(r); err != nil {
			return err
		}
		s.log.Warn("a task was interrupted by the updater stopping; reported failed", "id", r.ID, "op", r.Op)
	}
	return nil
}

// maxConnections bounds the allowed peer's connections served at once;
// more are closed unanswered (one agent needs one at a time). Refused
// peers never take one.
const maxConnections = 16

// requestTimeout bounds reading a request and writing its response.
const requestTimeout = 10 * time.Second

// refuse answers a refused peer's connection with the refusal and closes
// it, without reading anything and without waiting: one write that fails
// rather than blocks (a fresh connection's buffer takes it). Its request,
// if it sent one, is left unread, so its read of the refusal may end in a
// reset; the Client returns the refusal all the same.
func refuse(c *net.UnixConn, why error) {
	defer func() { _ = c.Close() }()
	b, _ := json.Marshal(Response{Code: CodeRefused, Error: why.Error()})
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Write(func(fd uintptr) bool {
		_ = unix.Sendto(int(fd), b, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
		return true // one try: never wait for the peer
	})
}

// refusalLog logs refused peers, at most one line per refusalLogEvery with
// the number of refusals it stands for, so that a refused peer connecting
// in a loop cannot flood the log, nor slow the accept loop that writes it.
// Only the accept loop uses it.
type refusalLog struct {
	last  time.Time
	count int   // refusals not logged yet
	err   error // the last of them
}

// refusalLogEvery is the least time between two lines of refusalLog.
const refusalLogEvery = 10 * time.Second

// note counts one refusal, at now, and logs it when the last line is old
// enough.
func (r *refusalLog) note(log *slog.Logger, err error, now time.Time) {
	r.count, r.err = r.count+1, err
	if r.last.IsZero() || now.Sub(r.last) >= refusalLogEvery {
		log.Warn("connection refused", "error", err, "refusals", r.count)
		r.last, r.count, r.err = now, 0, nil
	}
}

// flush logs the refusals not logged yet, with the last one's error: the
// server stops, so no later refusal would log them.
func (r *refusalLog) flush(log *slog.Logger) {
	if r.count > 0 {
		log.Warn("connection refused", "error", r.err, "refusals", r.count)
		r.count, r.err = 0, nil
	}
}

// serve answers one connection of the allowed peer: one request is read
// and answered.
func (s *server) serve(tctx context.Context, wg *sync.WaitGroup, c *net.UnixConn) {
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(requestTimeout))
	req, err := DecodeRequest(c)
	if err != nil {
		s.log.Warn("request refused", "error", err)
		drain(c)
		s.reply(c, Response{Code: CodeInvalid, Error: err.Error()})
		return
	}
	s.reply(c, s.handle(tctx, wg, req))
}

// drain discards what the peer sent (at most 64 KiB, within the
// connection's deadline) so that closing does not reset the connection
// before the peer reads the refusal.
func drain(c *net.UnixConn) {
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

func (s *server) reply(c *net.UnixConn, r Response) {
	b, _ := json.Marshal(r)
	_, _ = c.Write(b)
}

// handle answers one valid request.
func (s *server) handle(tctx context.Context, wg *sync.WaitGroup, req Request) Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Op == OpHello {
		s.helloSeq++
		s.helloVersion = req.Version
		close(s.helloCh)
		s.helloCh = make(chan struct{})
		s.log.Info("agent hello", "version", req.Version)
		return Response{Op: OpHello, AgentVersion: req.Version}
	}
	if s.cur != nil && s.cur.rec.ID == req.ID {
		return s.cur.snapshot()
	}
	rec, ok, err := s.store.get(req.ID)
	if err != nil {
		return Response{ID: req.ID, Code: CodeInternal, Error: err.Error()}
	}
	if ok {
		return rec.Response
	}
	if req.Op == OpStatus {
		return Response{ID: req.ID, Op: OpStatus, Code: CodeUnknownTask, Error: ErrUnknownTask.Error() + ": " + req.ID}
	}
	if s.cur != nil {
		return Response{ID: req.ID, Op: req.Op, Code: CodeBusy, Error: fmt.Sprintf("%s (%s %s)", ErrBusy, s.cur.rec.Op, s.cur.rec.ID)}
	}
	r := &running{rec: Record{Response: Response{ID: req.ID, Op: req.Op, Phase: events.TaskRunning}, Started: time.Now().UTC()}, out: newTail()}
	if err := s.store.put(r.rec); err != nil {
		return Response{ID: req.ID, Code: CodeInternal, Error: err.Error()}
	}
	s.cur = r
	s.log.Info("task started", "id", req.ID, "op", req.Op)
	wg.Go(func() { s.runTask(tctx, r, req) })
	return r.snapshot()
}

// snapshot is the running task's response, with its output so far.
func (r *running) snapshot() Response {
	resp := r.rec.Response
	resp.Output = r.out.String()
	return resp
}

// runTask runs one task and records its result.
func (s *server) runTask(tctx context.Context, r *running, req Request) {
	ctx, cancel := context.WithTimeout(tctx, s.o.TaskTimeout)
	defer cancel()
	var err error
	res := r.rec
	switch req.Op {
	case OpSystemUpgrade:
		res.Changes, err = s.o.Apt.SystemUpgrade(ctx, r.out)
	case OpAgentUpgrade:
		res.AgentVersion, err = s.o.Agent.upgradeAgent(ctx, *req.Agent, r.out, s, func(prev string) error {
			s.mu.Lock()
			r.rec.Previous = prev
			rec := r.rec
			s.mu.Unlock()
			return s.store.put(rec)
		})
		s.mu.Lock()
		res.Previous = r.rec.Previous
		s.mu.Unlock()
	default:
		err = fmt.Errorf("%w: %s", ErrNotImplemented, req.Op)
	}
	res.Phase, res.Finished, res.Output = events.TaskSucceeded, time.Now().UTC(), r.out.String()
	if err != nil {
		res.Phase, res.Error = events.TaskFailed, err.Error()
		if tctx.Err() != nil {
			res.Error = "stopped: the updater was asked to stop while the task ran: " + err.Error()
		}
	}
	if perr := s.store.put(res); perr != nil {
		s.log.Error("task record not written", "id", res.ID, "error", perr)
	}
	s.log.Info("task done", "id", res.ID, "op", res.Op, "phase", res.Phase, "error", res.Error, "changes", len(res.Changes))
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
}

// mark implements helloWaiter.
func (s *server) mark() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.helloSeq
}

// wait implements helloWaiter.
func (s *server) wait(ctx context.Context, seq uint64, want string, timeout time.Duration) (string, bool) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		got, n, ch := s.helloVersion, s.helloSeq, s.helloCh
		s.mu.Unlock()
		heard := n > seq
		if heard && (want == "" || got == want) {
			return got, true
		}
		if !heard {
			got = ""
		}
		select {
		case <-ch:
		case <-t.C:
			return got, false
		case <-ctx.Done():
			return got, false
		}
	}
}
