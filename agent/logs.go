// What a service printed, made fit for a report (ADR 0019, A.3): the
// last lines of a container's log, cleaned, bounded and redacted.

package agent

import (
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nationtech/harmony-fleet/events"
)

// Bounds of the output a health report or an *UnstableError quotes.
const (
	// maxLogLines is how many of a service's last lines are kept.
	maxLogLines = events.MaxHealthLogLines
	// maxLogLineRunes bounds one line; a longer one ends in "…".
	maxLogLineRunes = events.MaxHealthLogLineRunes
	// maxLogBytes bounds a service's lines together; past it the oldest
	// lines go.
	maxLogBytes = events.MaxHealthServiceLogBytes
	// logTail is how many lines are asked of the engine.
	logTail = 50
)

// ansiEscape matches terminal escape sequences: CSI (colours, cursor)
// and OSC (titles, links) sequences, and any other two-byte escape.
var ansiEscape = regexp.MustCompile(`\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])`)

// redactOutput makes a service's last lines fit a report: invalid UTF-8
// replaced, terminal escape sequences and control characters removed
// (a tab is a space), every secret value replaced by "***" (redactText,
// across lines too), blank lines dropped, each line at most
// maxLogLineRunes runes, the last maxLogLines lines, at most maxLogBytes
// together (the oldest go first). When a secret value shorter than
// minRedacted appears, the whole output is withheld: one line saying so.
func redactOutput(lines []string, secrets []string) []string {
	clean := make([]string, 0, len(lines))
	for _, l := range lines {
		clean = append(clean, cleanLine(l))
	}
	text, ok := redactText(strings.Join(clean, "\n"), secrets)
	if !ok {
		return []string{withheldOutput}
	}
	var out []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimRightFunc(l, unicode.IsSpace)
		if strings.TrimSpace(l) == "" {
			continue
		}
		if r := []rune(l); len(r) > maxLogLineRunes {
			l = string(r[:maxLogLineRunes-1]) + "…"
		}
		out = append(out, l)
	}
	if len(out) > maxLogLines {
		out = out[len(out)-maxLogLines:]
	}
	for size(out) > maxLogBytes {
		out = out[1:]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// cleanLine is l without escape sequences and control characters, valid
// UTF-8.
func cleanLine(l string) string {
	l = strings.ToValidUTF8(l, "\uFFFD")
	l = ansiEscape.ReplaceAllString(l, "")
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t':
			return ' '
		case r == utf8.RuneError:
			return r
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Bidi_Control, r):
			return -1
		}
		return r
	}, l)
}

// size is the bytes of lines together.
func size(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}
