package agent

import (
	"errors"
	"testing"
)

func TestTheLocalZoneIsNamedAsGoResolvesIt(t *testing.T) {
	tests := []struct {
		name     string
		tz       *string // nil: unset
		link     string  // /etc/localtime's target ("": no link)
		timezone string  // /etc/timezone ("": none)
		want     string
	}{
		{"TZ names the zone", ptr("Asia/Tokyo"), "/usr/share/zoneinfo/Europe/Paris", "", "Asia/Tokyo"},
		{"a colon before TZ is dropped", ptr(":America/New_York"), "", "", "America/New_York"},
		{"an empty TZ is UTC", ptr(""), "/usr/share/zoneinfo/Europe/Paris", "", "UTC"},
		{"TZ as a tz database path is named by its path below zoneinfo", ptr("/usr/share/zoneinfo/Europe/Berlin"), "", "", "Europe/Berlin"},
		{"TZ as /etc/localtime reads the link", ptr("/etc/localtime"), "../usr/share/zoneinfo/Europe/Lisbon", "", "Europe/Lisbon"},
		{"no TZ reads the link of /etc/localtime", nil, "/usr/share/zoneinfo/Australia/Sydney", "Europe/Paris", "Australia/Sydney"},
		{"a posix/ link is named without it", nil, "/usr/share/zoneinfo/posix/Europe/Rome", "", "Europe/Rome"},
		{"a copied /etc/localtime is named by /etc/timezone", nil, "", "Europe/Madrid\n", "Europe/Madrid"},
		{"nothing to name it by gives no name", nil, "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := zoneSources{
				getenv: func(string) (string, bool) {
					if tc.tz == nil {
						return "", false
					}
					return *tc.tz, true
				},
				readlink: func(string) (string, error) {
					if tc.link == "" {
						return "", errors.New("not a link")
					}
					return tc.link, nil
				},
				readFile: func(string) ([]byte, error) {
					if tc.timezone == "" {
						return nil, errors.New("no file")
					}
					return []byte(tc.timezone), nil
				},
			}
			if got := localZoneName(src); got != tc.want {
				t.Errorf("localZoneName = %q, want %q", got, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
