package dashboard

import (
	"testing"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

func TestSafeReturnKeepsSignInOnTheDashboard(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"a local path is kept", "/devices/d1?command=x", "/devices/d1?command=x"},
		{"an empty return goes to the overview", "", "/"},
		{"an absolute URL goes to the overview", "https://evil.example/", "/"},
		{"a scheme-relative URL goes to the overview", "//evil.example/x", "/"},
		{"a backslash trick goes to the overview", "/\\evil.example", "/"},
		{"a relative path goes to the overview", "devices", "/"},
		{"a header injection goes to the overview", "/x\r\nSet-Cookie: a=b", "/"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := returnPath(testOrigin, tc.in); got != tc.want {
				t.Errorf("returnPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestBoundedCutsAtARuneAndMarksTheCut(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"a short text is kept", "abc", 5, "abc"},
		{"a long text is cut and marked", "abcdef", 3, "abc…"},
		{"a cut inside a rune moves before it", "aé", 2, "a…"},
		{"invalid UTF-8 is replaced", "a\xffb", 10, "a\uFFFDb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := bounded(tc.in, tc.n); got != tc.want {
				t.Errorf("bounded(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
		})
	}
}

func TestASealedValueOpensOnlyUnderItsKeyAndName(t *testing.T) {
	k1, k2 := make([]byte, SessionKeySize), make([]byte, SessionKeySize)
	k2[0] = 1
	s1, err := newSealer(k1)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := newSealer(k2)
	v, err := s1.seal("fleet_session", session{ID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var got session
	if err := s1.open("fleet_session", v, &got); err != nil || got.ID != "x" {
		t.Fatalf("open under its key and name: %v %+v", err, got)
	}
	if s2.open("fleet_session", v, &got) == nil {
		t.Error("the value opens under another key")
	}
	if s1.open("fleet_login", v, &got) == nil {
		t.Error("the value opens as another cookie")
	}
}

func TestMergingPendingChangesKeepsEveryPageAndAnAllPagesChange(t *testing.T) {
	dev := fleetview.PageRef{Kind: fleetview.PageDevice, Key: "d1"}
	ov := fleetview.PageRef{Kind: fleetview.PageOverview}
	tests := []struct {
		name string
		a, b fleetview.Change
		want []fleetview.PageRef // pages the merge must affect
		all  bool
	}{
		{"two lists are joined", fleetview.Change{Pages: []fleetview.PageRef{dev}}, fleetview.Change{Pages: []fleetview.PageRef{ov}}, []fleetview.PageRef{dev, ov}, false},
		{"an all-pages change pending stays all pages", fleetview.Change{All: true}, fleetview.Change{Pages: []fleetview.PageRef{ov}}, []fleetview.PageRef{dev, ov}, true},
		{"an all-pages change arriving makes it all pages", fleetview.Change{Pages: []fleetview.PageRef{dev}}, fleetview.Change{All: true}, []fleetview.PageRef{dev, ov}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := merge(tc.a, tc.b)
			if got.All != tc.all {
				t.Errorf("merge(%+v, %+v).All = %v, want %v", tc.a, tc.b, got.All, tc.all)
			}
			for _, p := range tc.want {
				if !got.Affects(p) {
					t.Errorf("merge(%+v, %+v) = %+v does not affect %+v", tc.a, tc.b, got, p)
				}
			}
		})
	}
}
