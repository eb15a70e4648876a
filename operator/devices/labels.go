package devices

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// ReservedLabel reports whether a label key belongs to the control plane:
// blacklist and every key under fleet.nationtech.io/. A device report can
// never add, change or remove a reserved label. canary is placement data and
// may be reported.
func ReservedLabel(key string) bool {
	return key == fleetv1.LabelBlacklist || strings.HasPrefix(key, fleetv1.ReservedLabelPrefix)
}

// reportableLabel reports whether a reported label may be mirrored: not
// reserved, and a valid Kubernetes label (an invalid one would make every
// label update fail).
func reportableLabel(key, value string) bool {
	return !ReservedLabel(key) && len(validation.IsQualifiedName(key)) == 0 && len(validation.IsValidLabelValue(value)) == 0
}

// MergeReportedLabels mirrors a device's reported labels onto its
// metadata.labels. labels are the Device's current metadata.labels; owned are
// the labels earlier reports set (status.reportedLabels); reported is the
// device's latest report. It returns the new metadata.labels and the new
// owned set. Inputs are not modified.
//
// The rules:
//   - reserved keys (see ReservedLabel) and invalid labels in the report are
//     ignored: a report never adds, changes or removes them;
//   - a key in owned is the reports': it follows the report (set, changed,
//     removed when no longer reported);
//   - a key on the Device that is not in owned was set by an admin and is
//     never touched, even when the device reports the same key;
//   - a reported key the Device does not carry is added and becomes owned.
func MergeReportedLabels(labels, owned, reported map[string]string) (newLabels, newOwned map[string]string) {
	newLabels = maps.Clone(labels)
	if newLabels == nil {
		newLabels = map[string]string{}
	}
	newOwned = map[string]string{}
	for k, v := range reported {
		if !reportableLabel(k, v) {
			continue
		}
		_, ours := owned[k]
		_, present := labels[k]
		if present && !ours {
			continue // an admin's label
		}
		newOwned[k] = v
		newLabels[k] = v
	}
	for k := range owned {
		if _, still := newOwned[k]; still || ReservedLabel(k) {
			continue
		}
		delete(newLabels, k)
	}
	return newLabels, newOwned
}

// claimedLabels is the owned set written before a label update: the old and
// the new owned keys together (new values win), so a crash between the
// status write and the label update never leaves a report-set label looking
// like an admin's.
func claimedLabels(owned, newOwned map[string]string) map[string]string {
	out := maps.Clone(owned)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, newOwned)
	return out
}

// LabelPins are an administrator's pins on a Device's labels: Values
// (spec.labels) keeps a key at a value, Removed (spec.removedLabels) keeps a
// key off. A pinned key is the administrator's: the reports no longer change
// it.
type LabelPins struct {
	Values  map[string]string
	Removed []string
}

// devicePins returns the pins of d's spec.
func devicePins(d *fleetv1.Device) LabelPins {
	var values map[string]string
	if len(d.Spec.Labels) > 0 {
		values = make(map[string]string, len(d.Spec.Labels))
		for k, v := range d.Spec.Labels {
			values[k] = string(v)
		}
	}
	return LabelPins{Values: values, Removed: d.Spec.RemovedLabels}
}

// keys returns the pinned keys, sorted, reserved ones left out (admission
// refuses them; the operator never writes a reserved label from a pin).
func (p LabelPins) keys() []string {
	out := make([]string, 0, len(p.Values)+len(p.Removed))
	for k := range p.Values {
		if !ReservedLabel(k) {
			out = append(out, k)
		}
	}
	for _, k := range p.Removed {
		if _, dup := p.Values[k]; !dup && !ReservedLabel(k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ClaimPinnedKeys returns owned with the keys pinned now (pins) and the
// keys pinned before (pinned, status.pinnedLabels) added, each with an
// empty value: the owned set to give MergeReportedLabels, so that a pinned
// key is the reports' underneath the pin. A reported pinned key then stays
// in status.reportedLabels (the difference shows), and a key whose pin is
// undone follows the reports again: it takes the reported value, or is
// removed when not reported, whoever set it before the pin. owned is not
// modified.
func ClaimPinnedKeys(owned map[string]string, pins LabelPins, pinned []string) map[string]string {
	out := maps.Clone(owned)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range append(pins.keys(), pinned...) {
		if _, ok := out[k]; !ok && !ReservedLabel(k) {
			out[k] = ""
		}
	}
	return out
}

// PinLabels applies an administrator's pins over a Device's labels merged
// from the reports. labels and owned are MergeReportedLabels's results (or
// the Device's metadata.labels and status.reportedLabels when there is no
// report yet); pinned are the keys pins set before (status.pinnedLabels).
// It returns the new metadata.labels and the new pinned keys (sorted).
// Inputs are not modified.
//
// The rules:
//   - a key of pins.Values is set to its value, a key of pins.Removed is
//     removed: whatever the reports or an earlier metadata.labels say;
//   - a key in pinned that is no longer pinned goes back to the reports: it
//     takes its value in owned, or is removed when the reports do not own
//     it;
//   - reserved keys (see ReservedLabel) are never set or removed by a pin.
func PinLabels(labels, owned map[string]string, pins LabelPins, pinned []string) (newLabels map[string]string, newPinned []string) {
	newLabels = maps.Clone(labels)
	if newLabels == nil {
		newLabels = map[string]string{}
	}
	newPinned = pins.keys()
	for _, k := range pinned {
		if slices.Contains(newPinned, k) || ReservedLabel(k) {
			continue
		}
		if v, ok := owned[k]; ok {
			newLabels[k] = v
		} else {
			delete(newLabels, k)
		}
	}
	for _, k := range newPinned {
		if v, ok := pins.Values[k]; ok {
			newLabels[k] = v
		} else {
			delete(newLabels, k)
		}
	}
	return newLabels, newPinned
}

// claimedPins is the pinned set written before a label update: the old and
// the new pinned keys together, so a crash between the status write and the
// label update never leaves a label a pin set looking like an admin's.
func claimedPins(pinned, newPinned []string) []string {
	out := slices.Concat(pinned, newPinned)
	slices.Sort(out)
	return slices.Compact(out)
}

// maxOverriddenMessage bounds the LabelsOverridden message (a condition
// message holds at most 32768 bytes).
const maxOverriddenMessage = 4096

// labelsOverridden returns the LabelsOverridden condition of d, whose pins
// are pins and whose reports own owned (status.reportedLabels); ok is false
// when d has no pin (the condition is then absent).
func labelsOverridden(d *fleetv1.Device, pins LabelPins, owned map[string]string) (c metav1.Condition, ok bool) {
	keys := pins.keys()
	if len(keys) == 0 {
		return metav1.Condition{}, false
	}
	differ := false
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		reported, isReported := owned[k]
		pinned, isValue := pins.Values[k]
		r := "not reported"
		if isReported {
			r = "reported " + strconv.Quote(reported)
		}
		p := "pinned absent"
		if isValue {
			p = "pinned " + strconv.Quote(pinned)
		}
		if isValue != isReported || pinned != reported {
			differ = true
		}
		parts = append(parts, k+": "+r+", "+p)
	}
	msg := strings.Join(parts, "; ")
	if len(msg) > maxOverriddenMessage {
		msg = msg[:maxOverriddenMessage-3] + "..."
	}
	if differ {
		return deviceCondition(d, fleetv1.ConditionLabelsOverridden, metav1.ConditionTrue, fleetv1.ReasonLabelsPinned, msg), true
	}
	return deviceCondition(d, fleetv1.ConditionLabelsOverridden, metav1.ConditionFalse, fleetv1.ReasonPinsMatchReports, msg), true
}
