package devicelogs

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PrintableLine is a line a device sent, safe to print on a terminal or
// a page: invalid UTF-8 replaced by U+FFFD, escape sequences and control
// characters (tab excepted), bidirectional controls and line separators
// shown as \xNN or \uNNNN, never interpreted.
func PrintableLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\t':
			b.WriteRune(r)
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, `\x%02x`, r)
		case r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		case r == utf8.RuneError:
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
