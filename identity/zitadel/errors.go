package zitadel

import "errors"

// ErrAPI means the management API answered with an error status; the
// wrapped message carries the status and Zitadel's message (never the token).
var ErrAPI = errors.New("zitadel: management API error")

// ErrNotFound means the user or key does not exist (HTTP 404).
var ErrNotFound = errors.New("zitadel: not found")
