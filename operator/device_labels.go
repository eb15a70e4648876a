package operator

import (
	"maps"
	"strings"

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
