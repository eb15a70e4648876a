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

// TestInvisibleCoversEveryCharacterDrawnAsNothing checks every range
// Invisible escapes (its first and last code point through Printable, and
// every one between through Invisible), and ordinary text that it keeps.
func TestInvisibleCoversEveryCharacterDrawnAsNothing(t *testing.T) {
	tests := []struct {
		name    string
		first   rune
		last    rune
		escaped bool
	}{
		{"C0 controls are invisible", 0x00, 0x1f, true},
		{"DEL and C1 controls are invisible", 0x7f, 0x9f, true},
		{"a soft hyphen is invisible", 0xad, 0xad, true},
		{"the combining grapheme joiner is invisible", 0x34f, 0x34f, true},
		{"the Arabic number signs (format characters) are invisible", 0x600, 0x605, true},
		{"the Arabic letter mark is invisible", 0x61c, 0x61c, true},
		{"the Hangul choseong and jungseong fillers are invisible", 0x115f, 0x1160, true},
		{"the Khmer inherent vowels are invisible", 0x17b4, 0x17b5, true},
		{"the Mongolian variation selectors and vowel separator are invisible", 0x180b, 0x180f, true},
		{"zero-width characters and directional marks are invisible", 0x200b, 0x200f, true},
		{"line and paragraph separators are invisible", 0x2028, 0x2029, true},
		{"bidirectional embeddings and overrides are invisible", 0x202a, 0x202e, true},
		{"the word joiner and invisible operators are invisible", 0x2060, 0x2064, true},
		{"bidirectional isolates and the deprecated format characters are invisible", 0x2066, 0x206f, true},
		{"the Hangul filler is invisible", 0x3164, 0x3164, true},
		{"variation selectors 1 to 16 are invisible", 0xfe00, 0xfe0f, true},
		{"the byte-order mark is invisible", 0xfeff, 0xfeff, true},
		{"the halfwidth Hangul filler is invisible", 0xffa0, 0xffa0, true},
		{"the unassigned specials are invisible", 0xfff0, 0xfff8, true},
		{"interlinear annotations are invisible", 0xfff9, 0xfffb, true},
		{"the shorthand format controls are invisible", 0x1bca0, 0x1bca3, true},
		{"the musical format controls are invisible", 0x1d173, 0x1d17a, true},
		{"tag characters are invisible", 0xe0000, 0xe007f, true},
		{"variation selectors 17 to 256 are invisible", 0xe0100, 0xe01ef, true},
		{"the rest of the tag plane's ignorable block is invisible", 0xe01f0, 0xe0fff, true},
		{"printable ASCII is kept", 0x20, 0x7e, false},
		{"Latin-1 letters are kept", 0xc0, 0xff, false},
		{"combining accents are kept", 0x300, 0x34e, false},
		{"Hangul syllables are kept", 0xac00, 0xd7a3, false},
		{"CJK ideographs are kept", 0x4e00, 0x9fff, false},
		{"emoji are kept", 0x1f600, 0x1f64f, false},
		{"the replacement character is kept", 0xfffd, 0xfffd, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []rune{tc.first, tc.last} {
				if got := events.Invisible(r); got != tc.escaped {
					t.Errorf("Invisible(%U) = %v, want %v", r, got, tc.escaped)
				}
				if got := events.Printable("a" + string(r) + "b"); (got != "a"+string(r)+"b") != tc.escaped {
					t.Errorf("Printable(a %U b) = %q", r, got)
				}
			}
			for r := tc.first; r <= tc.last; r++ {
				if events.Invisible(r) != tc.escaped {
					t.Errorf("Invisible(%U) = %v, want %v", r, !tc.escaped, tc.escaped)
				}
			}
		})
	}
}

func TestPrintableEscapesCharactersPastTheBasicPlaneWithEightDigits(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"a tag character has eight hex digits", "v1\U000e0041", `v1\U000e0041`},
		{"a variation selector past the basic plane has eight hex digits", "a\U000e0100b", `a\U000e0100b`},
		{"an emoji's variation selector is shown as an escape", "ok ❤\ufe0f", `ok ❤\ufe0f`},
		{"an emoji without a variation selector is kept", "ok 😀", "ok 😀"},
		{"accents, CJK and Hangul are kept", "café 日本語 한국어", "café 日本語 한국어"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := events.Printable(tc.in); got != tc.want {
				t.Errorf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPrintableCutBoundsTheEscapedText(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		n     int
		lines bool
		want  string
	}{
		{"text that fits is only escaped", "a\u202eb", 16, false, `a\u202eb`},
		{"text that fits escaped is kept whole", "a\x1bb", 8, false, `a\u001bb`},
		{"text that does not fit escaped is cut with a marker", "a\x1bbcdef", 8, false, "a…"},
		{"the cut never splits an escape", "\x1b\x1b\x1b", 15, false, `\u001b\u001b…`},
		{"the cut never splits a character", "日本語", 8, false, "日…"},
		{"an escape past the basic plane is kept whole or dropped", "a\U000e0041b", 11, false, "a…"},
		{"bytes that are not UTF-8 are replaced before the cut", "\xffabcdef", 7, false, "\uFFFDa…"},
		{"a bound under the marker gives nothing", "abcdef", 2, false, ""},
		{"line feeds and tabs of lines are kept", "a\n\tb\x00", 32, true, "a\n\tb\\u0000"},
		{"lines are cut after escaping too", "a\nb\x00\x00c", 10, true, "a\nb…"},
		{"one line escapes line feeds", "a\nb", 16, false, `a\u000ab`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cut := events.PrintableCut
			if tc.lines {
				cut = events.PrintableLinesCut
			}
			got := cut(tc.in, tc.n)
			if got != tc.want {
				t.Errorf("cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
			if len(got) > tc.n {
				t.Errorf("cut(%q, %d) has %d bytes", tc.in, tc.n, len(got))
			}
		})
	}
}
