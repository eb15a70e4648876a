package updater

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// maxResponseSize bounds a response the client reads (output tail plus a
// long list of package changes).
const maxResponseSize = 8 << 20

// Client asks the updater on its socket, one request per connection.
type Client struct {
	// Socket is the updater's socket path.
	Socket string
	// Timeout bounds one request (default 30 s).
	Timeout time.Duration
}

// RemoteError is the updater's refusal of a request (Response.Code set).
type RemoteError struct {
	// Code is the Response's code (CodeBusy, …); Msg its error.
	Code string
	Msg  string
}

// Error implements error.
func (e *RemoteError) Error() string { return "updater: " + e.Msg }

// Is maps the code back to this package's sentinels.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case CodeBusy:
		return target == ErrBusy
	case CodeInvalid:
		return target == ErrInvalidRequest
	case CodeRefused:
		return target == ErrPeerRefused
	case CodeUnknownTask:
		return target == ErrUnknownTask
	}
	return false
}

// Do sends one request and returns the response; a refusal (a Response
// with a Code) is a *RemoteError, also when the updater answered before it
// read the request and closed (as it does for a refused peer).
func (c Client) Do(ctx context.Context, req Request) (Response, error) {
	req.V = ProtocolVersion
	if err := req.Validate(); err != nil {
		return Response{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		return Response{}, fmt.Errorf("updater at %s: %w", c.Socket, err)
	}
	defer func() { _ = conn.Close() }()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	b, _ := json.Marshal(req)
	_, werr := conn.Write(b)
	_ = conn.(*net.UnixConn).CloseWrite()
	raw, rerr := io.ReadAll(io.LimitReader(conn, maxResponseSize+1))
	// The updater answers a refused peer at once and closes without
	// reading: the send then fails (broken pipe), or the read ends in a
	// reset after the refusal. The refusal is the answer.
	var resp Response
	if len(raw) <= maxResponseSize && json.Unmarshal(raw, &resp) == nil && resp.Code != "" {
		return resp, &RemoteError{Code: resp.Code, Msg: resp.Error}
	}
	if werr != nil {
		return Response{}, fmt.Errorf("updater at %s: send: %w", c.Socket, werr)
	}
	if rerr != nil {
		return Response{}, fmt.Errorf("updater at %s: read: %w", c.Socket, rerr)
	}
	if len(raw) > maxResponseSize {
		return Response{}, fmt.Errorf("updater at %s: response longer than %d bytes", c.Socket, maxResponseSize)
	}
	resp = Response{}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return Response{}, fmt.Errorf("updater at %s: the response does not decode (%d bytes)", c.Socket, len(raw))
	}
	if resp.Code != "" {
		return resp, &RemoteError{Code: resp.Code, Msg: resp.Error}
	}
	return resp, nil
}

// Start asks for task id (OpSystemUpgrade or OpAgentUpgrade) to run; the
// response is its record when it ran or runs already (the same id never
// runs twice), else Running.
func (c Client) Start(ctx context.Context, id, task string, agent *events.AgentArtifact) (Response, error) {
	return c.Do(ctx, Request{ID: id, Op: task, Agent: agent})
}

// Status returns the record of task id; an unknown id is an error wrapping
// ErrUnknownTask.
func (c Client) Status(ctx context.Context, id string) (Response, error) {
	return c.Do(ctx, Request{ID: id, Op: OpStatus})
}

// Hello tells the updater the running agent's version.
func (c Client) Hello(ctx context.Context, version string) error {
	_, err := c.Do(ctx, Request{Op: OpHello, Version: version})
	return err
}

// Wait polls Status every interval until task id is done or ctx ends.
func (c Client) Wait(ctx context.Context, id string, interval time.Duration) (Response, error) {
	for {
		r, err := c.Status(ctx, id)
		if err == nil && r.Done() {
			return r, nil
		}
		if err != nil && errors.Is(err, ErrUnknownTask) {
			return r, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return r, ctx.Err()
		case <-t.C:
		}
	}
}
