package fleetview

import "errors"

// ErrNotFound: the device, Deployment or TaskRun a page asks for does not
// exist in the cache.
var ErrNotFound = errors.New("not found")

// ErrInvalidQuery: a query parameter is invalid; the error names it and says
// how to fix it. The HTTP layer answers 400 with it.
var ErrInvalidQuery = errors.New("invalid query")

// ErrInvalidOptions: the Options of NewLive are invalid.
var ErrInvalidOptions = errors.New("invalid fleetview options")

// ErrNotImplemented: the source cannot answer this read. Neither the live
// View nor the mock returns it today; a Source that cannot serve a page
// (a future one, or a page the HTTP layer adds before its data) does.
var ErrNotImplemented = errors.New("not implemented")

// ErrAlreadyRunning: Run was called on a View that already ran; a View's
// trend would count every record twice.
var ErrAlreadyRunning = errors.New("fleetview: the View already runs: call Run once")
