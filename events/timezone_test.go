package events_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
)

// A device's reported time zone is hostile: only an IANA name of the
// reader's tz database is loaded, never a path or the reader's own zone.
func TestAReportedTimeZoneIsLoadedOnlyWhenItIsAnIANAName(t *testing.T) {
	tests := []struct {
		name    string
		zone    string
		want    string // the location's name; "" refused
		errText string // in the error when refused
	}{
		{"an IANA name is loaded", "Europe/Paris", "Europe/Paris", ""},
		{"a name of three segments is loaded", "America/Argentina/Buenos_Aires", "America/Argentina/Buenos_Aires", ""},
		{"UTC is loaded", "UTC", "UTC", ""},
		{"a name with a sign is loaded", "Etc/GMT+5", "Etc/GMT+5", ""},
		{"the empty name is refused", "", "", "empty"},
		{"Local, the reader's own zone, is refused", "Local", "", "the reader's zone"},
		{"a relative path out of the database is refused", "../../etc/passwd", "", "an IANA name such as Europe/Paris"},
		{"a dot segment inside a name is refused", "Europe/../../../etc/shadow", "", "an IANA name"},
		{"an absolute path is refused", "/etc/localtime", "", "an IANA name"},
		{"a trailing slash is refused", "Europe/", "", "an IANA name"},
		{"a double slash is refused", "Europe//Paris", "", "an IANA name"},
		{"a NUL byte is refused", "Europe/Paris\x00", "", "an IANA name"},
		{"a terminal escape is refused and shown escaped", "\x1b]52;c;aGk=\x07", "", `\u001b`},
		{"a space is refused", "Europe/Paris ", "", "an IANA name"},
		{"a name longer than 64 bytes is refused and cut in the error", strings.Repeat("A", 10000), "", "longer than 64 bytes"},
		{"a well-formed name the database does not hold is refused", "Mars/Olympus_Mons", "", "not in the tz database"},
		{"a Windows zone name is refused", "W. Europe Standard Time", "", "an IANA name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			loc, err := events.LoadTimeZone(tc.zone)
			if tc.want != "" {
				if err != nil || loc.String() != tc.want {
					t.Fatalf("LoadTimeZone(%q) = %v, %v; want %s", tc.zone, loc, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("LoadTimeZone(%q) = %v, want an error", tc.zone, loc)
			}
			if !errors.Is(err, events.ErrInvalidTimeZone) || !strings.Contains(err.Error(), tc.errText) {
				t.Errorf("error %q: want ErrInvalidTimeZone saying %q", err, tc.errText)
			}
			if len(err.Error()) > 300 || strings.ContainsAny(err.Error(), "\x00\x1b\x07") {
				t.Errorf("the error is long or carries a control byte: %q", err)
			}
		})
	}
}
