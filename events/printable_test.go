package events_test

import (
	"testing"

	"github.com/nationtech/harmony-fleet/events"
)

func TestPrintableEscapesWhatHidesOrReordersText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain text is kept", "v1.4.2 (Debian 12)", "v1.4.2 (Debian 12)"},
		{"letters of other scripts are kept", "Ubuntu 日本語 é", "Ubuntu 日本語 é"},
		{"a right-to-left override is escaped", "v1\u202egnp.exe", `v1\u202egnp.exe`},
		{"every bidirectional embedding, override and isolate is escaped", "a\u202ab\u202bc\u202cd\u202de\u2066f\u2067g\u2068h\u2069",
			`a\u202ab\u202bc\u202cd\u202de\u2066f\u2067g\u2068h\u2069`},
		{"zero-width characters and marks are escaped", "a\u200bb\u200cc\u200dd\u200ee\u200ff\ufeffg\u2060",
			`a\u200bb\u200cc\u200dd\u200ee\u200ff\ufeffg\u2060`},
		{"line and paragraph separators are escaped", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"C0 controls and DEL are escaped", "a\nb\x00c\x1b[31md\x7f", `a\u000ab\u0000c\u001b[31md\u007f`},
		{"C1 controls are escaped", "a\u0085b\u009bc", `a\u0085b\u009bc`},
		{"bytes that are not UTF-8 are replaced", "a\xffb", "a\uFFFDb"},
		{"an escape already in the text stays as it is", `a\u202eb`, `a\u202eb`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := events.Printable(tc.in); got != tc.want {
				t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPrintableLinesKeepsLinesAndTabs(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain text is kept", "exit 3", "exit 3"},
		{"line feeds and tabs are kept", "dpkg: error\n\tlibc6", "dpkg: error\n\tlibc6"},
		{"the rest is escaped on every line", "a\u202eb\nc\rd\x00", `a\u202eb` + "\n" + `c\u000dd\u0000`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := events.PrintableLines(tc.in); got != tc.want {
				t.Errorf("PrintableLines(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
