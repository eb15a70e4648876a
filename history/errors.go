package history

import "errors"

// ErrNoEvents is returned when the streams hold no event for what was asked
// (an unknown Deployment or device, a time before the first event).
var ErrNoEvents = errors.New("no events found")

// ErrInvalidOptions is wrapped by Options.Validate when an option is missing
// or out of range.
var ErrInvalidOptions = errors.New("invalid history options")

// ErrUnknownFormat is returned by ParseFormat for an output format other than
// text or json.
var ErrUnknownFormat = errors.New("unknown output format")
