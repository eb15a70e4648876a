package dashboard

import "errors"

// ErrInvalidOptions: the Options are invalid; the error names the field and
// the fix.
var ErrInvalidOptions = errors.New("invalid dashboard options")

// ErrNotFound: the device an action names does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalidInput: a form field is invalid; the error names it.
var ErrInvalidInput = errors.New("invalid input")

// ErrNotImplemented: the action is not available in this configuration.
var ErrNotImplemented = errors.New("not implemented")
