package followers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAFollowChangeNamesTheSelectorsLabelsThatChanged: the change text of
// a follow transition names the selector's labels only, what they are and
// what they were.
func TestAFollowChangeNamesTheSelectorsLabelsThatChanged(t *testing.T) {
	sel := map[string]string{"role": "analyzer", "site": "lyon"}
	for _, tc := range []struct {
		name      string
		prev, cur map[string]string
		hadPrev   bool
		want      string
	}{
		{"a device seen for the first time: its selector labels", nil, map[string]string{"role": "analyzer", "site": "lyon", "board": "rpi"}, false,
			"role=analyzer,site=lyon"},
		{"one label changed: now and was", map[string]string{"role": "analyzer", "site": "paris"}, map[string]string{"role": "analyzer", "site": "lyon"}, true,
			"site=lyon (was site=paris)"},
		{"a label set", map[string]string{"role": "analyzer"}, map[string]string{"role": "analyzer", "site": "lyon"}, true,
			"site=lyon (was site unset)"},
		{"a label removed", map[string]string{"role": "analyzer", "site": "lyon"}, map[string]string{"role": "analyzer"}, true,
			"site unset (was site=lyon)"},
		{"labels outside the selector are not named", map[string]string{"role": "x", "board": "a"}, map[string]string{"role": "analyzer", "board": "b"}, true,
			"role=analyzer (was role=x)"},
		{"no selector label changed: the selector labels", map[string]string{"role": "analyzer", "site": "lyon"}, map[string]string{"role": "analyzer", "site": "lyon", "x": "y"}, true,
			"role=analyzer,site=lyon"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, labelChange(sel, tc.prev, tc.cur, tc.hadPrev)); diff != "" {
				t.Errorf("change (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAFollowChangeNamesTheGroupsThatChanged: a membership change is
// worded with the device's groups now and before.
func TestAFollowChangeNamesTheGroupsThatChanged(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, cur []string
		hadPrev   bool
		want      string
	}{
		{"entered a group", nil, []string{"lyon"}, true, "groups lyon (was none)"},
		{"left every group", []string{"lyon", "paris"}, nil, true, "groups none (was lyon,paris)"},
		{"groups not known before: those now", nil, []string{"lyon", "paris"}, false, "groups lyon,paris"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, groupChange(tc.prev, tc.cur, tc.hadPrev)); diff != "" {
				t.Errorf("change (-want +got):\n%s", diff)
			}
		})
	}
}
