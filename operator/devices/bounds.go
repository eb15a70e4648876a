// The bounds of what a device's reports put on its Device: how many
// reported labels are mirrored and how long each inventory string may be,
// so one device's reports never make its Device (which every informer,
// selector evaluation and etcd carry) large.

package devices

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Bounds of what one device's reports put on its Device. A real device
// reports a handful of placement labels (site, role, zone: a few hundred
// bytes) and inventory strings of a few dozen bytes (a kernel release is at
// most 64, an os-release PRETTY_NAME a few dozen): none comes near them.
const (
	// MaxReportedLabels is how many reported labels are mirrored onto a
	// Device: the first ones in key order.
	MaxReportedLabels = 64
	// MaxReportedLabelBytes bounds the keys and values of the mirrored
	// reported labels together, in bytes.
	MaxReportedLabelBytes = 4096
	// MaxInventoryField is the longest inventory string (os, arch,
	// kernel, agentVersion) a Device keeps, in bytes, after invisible
	// characters are escaped; a longer one is cut on a rune boundary and
	// ends in "…".
	MaxInventoryField = 256
	// MaxDeviceStatusBytes is what the bounds above keep a Device's status
	// under, encoded as JSON, whatever the device reports (checked by a
	// test on the worst case), status.workloads aside: that has its own
	// bound, MaxDeviceWorkloadsBytes.
	MaxDeviceStatusBytes = 16 << 10
)

// trim is one thing a bound dropped or cut from a report.
type trim struct {
	// field is the metric label: labels, inventory.os, inventory.arch,
	// inventory.kernel, inventory.agentVersion or inventory.timeZone.
	field   string
	message string
}

// boundedReport is a device's inventory as its Device may carry it: labels
// bounded (reportable ones only), strings escaped (events.Printable) and
// cut, and what was dropped.
type boundedReport struct {
	events.DeviceInventory
	trims []trim
}

// boundReport applies the bounds to an inventory. It is deterministic: the
// same report is always bounded the same way. inv is not modified.
func boundReport(inv events.DeviceInventory) boundedReport {
	var out boundedReport
	var t *trim
	out.Labels, t = boundReportedLabels(inv.Labels)
	if t != nil {
		out.trims = append(out.trims, *t)
	}
	for _, f := range []struct {
		name string
		in   string
		out  *string
	}{{"os", inv.OS, &out.OS}, {"arch", inv.Arch, &out.Arch}, {"kernel", inv.Kernel, &out.Kernel}, {"agentVersion", inv.AgentVersion, &out.AgentVersion}} {
		var cutOff bool
		*f.out, cutOff = printableCut(f.in, MaxInventoryField)
		if cutOff {
			out.trims = append(out.trims, trim{field: "inventory." + f.name,
				message: fmt.Sprintf("inventory.%s truncated from %s to %s bytes", f.name, thousands(len(f.in)), thousands(MaxInventoryField))})
		}
	}
	// The time zone is kept only when it is an IANA name of the tz
	// database (events.LoadTimeZone): a device's input, never a path.
	if tz := inv.TimeZone; tz != "" {
		if _, err := events.LoadTimeZone(tz); err == nil {
			out.TimeZone = tz
		} else {
			// Named, never quoted: the condition carries no device text.
			out.trims = append(out.trims, trim{field: "inventory.timeZone",
				message: fmt.Sprintf("inventory.timeZone of %s bytes ignored: not an IANA time zone of the tz database", thousands(len(tz)))})
		}
	}
	return out
}

// boundReportedLabels keeps the reportable labels of a report (see
// reportableLabel) up to MaxReportedLabels and MaxReportedLabelBytes: the
// first keys in sorted order, up to the first that does not fit. It is a
// step before MergeReportedLabels, which never sees the rest. It returns
// nil for no labels, and a trim when it dropped any.
func boundReportedLabels(reported map[string]string) (map[string]string, *trim) {
	var out map[string]string
	valid, size, full := 0, 0, false
	for _, k := range slices.Sorted(maps.Keys(reported)) {
		v := reported[k]
		if !reportableLabel(k, v) {
			continue
		}
		valid++
		// Once one does not fit, none after it is kept: the kept set is
		// a prefix of the sorted keys, whatever their lengths.
		full = full || len(out) == MaxReportedLabels || size+len(k)+len(v) > MaxReportedLabelBytes
		if full {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
		size += len(k) + len(v)
	}
	if len(out) == valid {
		return out, nil
	}
	return out, &trim{field: "labels", message: fmt.Sprintf("dropped %s of %s reported labels (at most %d labels, %s bytes)",
		thousands(valid-len(out)), thousands(valid), MaxReportedLabels, thousands(MaxReportedLabelBytes))}
}

// printableCut returns events.Printable(s) when it has at most max bytes;
// else the longest prefix of it that fits with "…" after it, cut between
// two characters of s (never inside an escape), with "…", and true.
func printableCut(s string, max int) (string, bool) {
	return events.PrintableCut(s, max), len(events.Printable(s)) > max
}

// thousands formats n with a comma every three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// trimmedCondition is the ReportTrimmed condition saying what trims
// dropped; its message names fields and counts only, never what the device
// sent.
func trimmedCondition(d *fleetv1.Device, trims []trim) metav1.Condition {
	msgs := make([]string, len(trims))
	for i, t := range trims {
		msgs[i] = t.message
	}
	return deviceCondition(d, fleetv1.ConditionReportTrimmed, metav1.ConditionTrue, fleetv1.ReasonReportOverBounds,
		"the device's last inventory is over the bounds of a Device: "+strings.Join(msgs, "; "))
}
