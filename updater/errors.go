package updater

import "errors"

// Sentinel errors. A Response carries their text; the client maps it back
// with errors.Is through *RemoteError.
var (
	// ErrBusy: another task runs; ask again when it is done.
	ErrBusy = errors.New("busy: another task is running")
	// ErrInvalidRequest: the request does not decode or is not allowed.
	ErrInvalidRequest = errors.New("invalid request")
	// ErrPeerRefused: the connecting process is not the allowed user.
	ErrPeerRefused = errors.New("peer refused")
	// ErrUnknownTask: no record of this task id.
	ErrUnknownTask = errors.New("unknown task")
	// ErrInterrupted: the updater stopped while the task ran; it is not
	// run again.
	ErrInterrupted = errors.New("interrupted: the updater stopped while the task ran; it is not run again")
	// ErrNotImplemented: an operation this build does not do.
	ErrNotImplemented = errors.New("not implemented")
	// ErrChecksum: a downloaded agent does not have the sha256 the task
	// names.
	ErrChecksum = errors.New("sha256 mismatch")
	// ErrUnhealthy: the new agent did not report the expected version in
	// time.
	ErrUnhealthy = errors.New("the new agent did not report its version in time")
)
