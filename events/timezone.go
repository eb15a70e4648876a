package events

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// A device's time zone (DeviceInventory.TimeZone) is device input: a name
// the readers resolve with the tz database of their own machine. Only the
// shape of an IANA name is accepted, so no name reaches the file system
// that could point outside the database ("../../etc/x", an absolute path)
// or name the reader's own zone ("Local").

// MaxTimeZoneName bounds the length of a time zone name in bytes (the
// longest IANA name, "America/Argentina/ComodRivadavia", has 32).
const MaxTimeZoneName = 64

// ErrInvalidTimeZone is returned by LoadTimeZone for a name that is not an
// IANA time zone the reader's tz database holds.
var ErrInvalidTimeZone = errors.New("invalid time zone")

// zoneCache holds the locations of the valid names loaded so far (at most
// the database's few hundred names: an invalid name is never kept).
var zoneCache sync.Map

// LoadTimeZone returns the location of a reported IANA time zone name:
// "UTC", or a name of letters, digits and "_", "+", "-" in segments
// separated by single "/" (no "." anywhere, so no path trick), at most
// MaxTimeZoneName bytes, that time.LoadLocation finds. "Local" and the
// empty name are refused: neither names the device's zone. The error
// wraps ErrInvalidTimeZone and quotes the name escaped and cut.
func LoadTimeZone(name string) (*time.Location, error) {
	if loc, ok := zoneCache.Load(name); ok {
		return loc.(*time.Location), nil
	}
	if err := checkTimeZoneName(name); err != nil {
		return nil, err
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q: not in the tz database: %w", ErrInvalidTimeZone, name, err)
	}
	zoneCache.Store(name, loc)
	return loc, nil
}

// checkTimeZoneName checks the shape of an IANA name.
func checkTimeZoneName(name string) error {
	quoted := func() string {
		s := name
		if len(s) > MaxTimeZoneName {
			s = s[:MaxTimeZoneName] + "…"
		}
		return fmt.Sprintf("%q", Printable(s))
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidTimeZone)
	case len(name) > MaxTimeZoneName:
		return fmt.Errorf("%w %s: longer than %d bytes", ErrInvalidTimeZone, quoted(), MaxTimeZoneName)
	case name == "Local":
		return fmt.Errorf("%w %s: names the reader's zone, not the device's", ErrInvalidTimeZone, quoted())
	}
	seg := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '+', c == '-':
			seg++
		case c == '/' && seg > 0 && i < len(name)-1:
			seg = 0
		default:
			return fmt.Errorf("%w %s: an IANA name such as Europe/Paris: letters, digits, _, + and - in segments separated by /", ErrInvalidTimeZone, quoted())
		}
	}
	return nil
}
