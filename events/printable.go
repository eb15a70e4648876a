package events

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Printable returns s, text a device reported, safe to show to a person: every
// character that is invisible or changes how the text around it is shown
// (see [Invisible]) becomes a visible escape such as \u202e (\U000e0041 past
// U+FFFF), and bytes that are not UTF-8 become U+FFFD. A right-to-left override in an agent version
// then cannot reverse a kubectl column or a dashboard cell. Text without
// such characters is returned as is. The result may be up to six times as
// long as s: bound it after.
func Printable(s string) string {
	if printableAlready(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range strings.ToValidUTF8(s, string(utf8.RuneError)) {
		if Invisible(r) {
			writeEscape(&b, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// PrintableLines is Printable for text of several lines (an error, a
// task's output): it keeps line feeds and tabs, and escapes the rest.
func PrintableLines(s string) string {
	if !strings.ContainsAny(s, "\n\t") {
		return Printable(s)
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		cells := strings.Split(l, "\t")
		for j, c := range cells {
			cells[j] = Printable(c)
		}
		lines[i] = strings.Join(cells, "\t")
	}
	return strings.Join(lines, "\n")
}

// writeEscape writes r as \u and four hex digits, or \U and eight past
// U+FFFF (a tag character is \U000e0041, never read as \ue004 and a "1").
func writeEscape(b *strings.Builder, r rune) {
	if r > 0xffff {
		fmt.Fprintf(b, `\U%08x`, r)
		return
	}
	fmt.Fprintf(b, `\u%04x`, r)
}

// CutMarker ends a text PrintableCut and PrintableLinesCut cut.
const CutMarker = "…"

// PrintableCut is Printable(s) bounded to at most n bytes: when the escaped
// text is longer, its longest prefix that fits with CutMarker after it,
// cut between two characters of s, so never inside a character or an
// escape (nothing when n is under the marker's length). Text a device
// reports may be far longer than the agent's bound and grows up to six
// times when escaped: whatever writes it into an object cuts it after
// escaping, with this.
func PrintableCut(s string, n int) string { return printableCut(s, n, false) }

// PrintableLinesCut is PrintableLines(s) bounded to at most n bytes as
// PrintableCut does.
func PrintableLinesCut(s string, n int) string { return printableCut(s, n, true) }

func printableCut(s string, n int, lines bool) string {
	p := Printable(s)
	if lines {
		p = PrintableLines(s)
	}
	if len(p) <= n {
		return p
	}
	if n < len(CutMarker) {
		return ""
	}
	var b strings.Builder
	b.Grow(n)
	var one strings.Builder
	for _, r := range strings.ToValidUTF8(s, string(utf8.RuneError)) {
		one.Reset()
		switch {
		case lines && (r == '\n' || r == '\t'), !Invisible(r):
			one.WriteRune(r)
		default:
			writeEscape(&one, r)
		}
		if b.Len()+one.Len() > n-len(CutMarker) {
			break
		}
		b.WriteString(one.String())
	}
	b.WriteString(CutMarker)
	return b.String()
}

func printableAlready(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || Invisible(r) {
			return false
		}
		i += n
	}
	return true
}

// Invisible reports whether r is a character Printable escapes: a C0 or C1
// control or DEL; a format character (Unicode category Cf: bidirectional
// embeddings, overrides, isolates and marks, zero-width characters, the
// byte-order mark, interlinear annotations, tag characters U+E0001 and
// U+E0020–U+E007F, …); a line or paragraph separator (Zl, Zp: U+2028,
// U+2029); or a default-ignorable code point (see [defaultIgnorable]:
// variation selectors, U+00AD, U+034F, U+180E, U+206A–U+206F, the Hangul
// fillers U+115F, U+1160, U+3164, U+FFA0, the unassigned U+E0000–U+E0FFF,
// …), which a terminal or a browser draws as nothing.
//
// An emoji's variation selector (U+FE0F after a heart, say) and the
// zero-width joiner of an emoji sequence are escaped too: a device's text
// with an emoji then shows "❤\ufe0f" rather than the emoji as the device
// chose to draw it. Device text is versions, errors and names, where this
// is acceptable; hiding a character from the person reading is not.
func Invisible(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r < 0xa0:
		return false
	}
	return unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, defaultIgnorable)
}

// defaultIgnorable is Unicode's Default_Ignorable_Code_Point property
// (DerivedCoreProperties.txt, Unicode 15.1): code points a renderer shows as
// nothing when it cannot draw them. Go's unicode package has only its
// Other_ part; the ranges are written out here (those also in Cf, such as
// U+200B–U+200F, are listed again, which costs nothing).
var defaultIgnorable = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x00ad, Hi: 0x00ad, Stride: 1}, // soft hyphen
		{Lo: 0x034f, Hi: 0x034f, Stride: 1}, // combining grapheme joiner
		{Lo: 0x061c, Hi: 0x061c, Stride: 1}, // Arabic letter mark
		{Lo: 0x115f, Hi: 0x1160, Stride: 1}, // Hangul choseong and jungseong fillers
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1}, // Khmer inherent vowels
		{Lo: 0x180b, Hi: 0x180f, Stride: 1}, // Mongolian free variation selectors, vowel separator
		{Lo: 0x200b, Hi: 0x200f, Stride: 1}, // zero-width space, (non-)joiner, LRM, RLM
		{Lo: 0x202a, Hi: 0x202e, Stride: 1}, // bidirectional embeddings and overrides
		{Lo: 0x2060, Hi: 0x206f, Stride: 1}, // word joiner, invisible operators, isolates, deprecated format characters
		{Lo: 0x3164, Hi: 0x3164, Stride: 1}, // Hangul filler
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1}, // variation selectors 1–16
		{Lo: 0xfeff, Hi: 0xfeff, Stride: 1}, // zero-width no-break space (byte-order mark)
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1}, // halfwidth Hangul filler
		{Lo: 0xfff0, Hi: 0xfff8, Stride: 1}, // unassigned specials
	},
	LatinOffset: 1,
	R32: []unicode.Range32{
		{Lo: 0x1bca0, Hi: 0x1bca3, Stride: 1}, // shorthand format controls
		{Lo: 0x1d173, Hi: 0x1d17a, Stride: 1}, // musical symbol format controls
		{Lo: 0xe0000, Hi: 0xe0fff, Stride: 1}, // tags, variation selectors 17–256, unassigned
	},
}
