package agent

import (
	"os"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// The device's time zone in its inventory (events.DeviceInventory.TimeZone):
// the IANA name of the zone its clock (Options.Now) reads maintenance
// windows in, so the control plane's readers (fleet rollout simulate, the
// Device status) read them as the device does.

// zoneSources are where the name of the machine's local zone is found:
// the environment, /etc/localtime's link target and /etc/timezone.
type zoneSources struct {
	getenv   func(string) (string, bool)
	readlink func(string) (string, error)
	readFile func(string) ([]byte, error)
}

// osZoneSources reads the machine's.
var osZoneSources = zoneSources{getenv: os.LookupEnv, readlink: os.Readlink, readFile: os.ReadFile}

// timeZoneName is the IANA name of loc for the inventory, "" when it has
// none: a location loaded by name is its name; time.Local is named as Go
// resolved it (TZ, else /etc/localtime), by TZ's value, by the tz database
// path /etc/localtime links to, or by /etc/timezone; a name is kept only
// when events.LoadTimeZone loads it and, for time.Local, it has the local
// zone's offsets in January and July (a copied /etc/localtime whose
// /etc/timezone says another zone is left unnamed).
func timeZoneName(loc *time.Location, src zoneSources) string {
	if loc != time.Local {
		if _, err := events.LoadTimeZone(loc.String()); err != nil {
			return ""
		}
		return loc.String()
	}
	name := localZoneName(src)
	zone, err := events.LoadTimeZone(name)
	if err != nil {
		return ""
	}
	for _, m := range []time.Month{time.January, time.July} {
		at := time.Date(time.Now().Year(), m, 15, 12, 0, 0, 0, time.UTC)
		_, got := at.In(zone).Zone()
		_, want := at.In(time.Local).Zone()
		if got != want {
			return ""
		}
	}
	return name
}

// localZoneName is the name time.Local was loaded by, as Go's time
// package resolves it: TZ when set (":" stripped; empty or "UTC" is UTC;
// an absolute path of the tz database is named by its path below
// zoneinfo/), else /etc/localtime, named by its link target or
// /etc/timezone. "" when it cannot be named.
func localZoneName(src zoneSources) string {
	tz, ok := src.getenv("TZ")
	if ok {
		tz = strings.TrimPrefix(tz, ":")
		switch {
		case tz == "", tz == "UTC":
			return "UTC"
		case !strings.HasPrefix(tz, "/"):
			return tz
		case tz != "/etc/localtime":
			return zoneinfoName(tz)
		}
	}
	if target, err := src.readlink("/etc/localtime"); err == nil {
		if name := zoneinfoName(target); name != "" {
			return name
		}
	}
	if b, err := src.readFile("/etc/timezone"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return ""
}

// zoneinfoName is the tz database name of a zone file's path: what
// follows its last "zoneinfo/" ("" without one).
func zoneinfoName(path string) string {
	_, name, ok := cutLast(path, "zoneinfo/")
	if !ok {
		return ""
	}
	return strings.TrimPrefix(name, "posix/")
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
