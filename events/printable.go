package events

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable returns s, text a device reported, safe to show to a person: every
// character that is invisible or changes how the text around it is shown
// (see [Invisible]) becomes a visible escape such as \u202e, and bytes that
// are not UTF-8 become U+FFFD. A right-to-left override in an agent version
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
			fmt.Fprintf(&b, `\u%04x`, r)
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
// control or DEL; a bidirectional embedding, override or isolate (U+202A–
// U+202E, U+2066–U+2069) or mark (U+200E, U+200F, U+061C); a zero-width
// character (U+200B–U+200D, U+2060–U+2064, U+FEFF); a line or paragraph
// separator (U+2028, U+2029); an interlinear annotation (U+FFF9–U+FFFB).
func Invisible(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r >= 0x200b && r <= 0x200f, r == 0x2028, r == 0x2029, r >= 0x202a && r <= 0x202e,
		r >= 0x2060 && r <= 0x2064, r >= 0x2066 && r <= 0x2069, r == 0xfeff, r >= 0xfff9 && r <= 0xfffb:
		return true
	}
	return false
}
