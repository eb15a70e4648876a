package agent

import (
	"slices"
	"strings"
	"testing"
)

func TestRedactOutputFitsAReportAndHidesSecrets(t *testing.T) {
	secrets := []string{"hunter2-long-secret", "hunter2"}
	tests := []struct {
		name    string
		lines   []string
		secrets []string
		want    []string
	}{
		{"plain lines are kept", []string{"starting", "boom"}, secrets, []string{"starting", "boom"}},
		{"a secret value is replaced in every line", []string{"user admin:hunter2", "token hunter2-long-secret ok"}, secrets,
			[]string{"user admin:***", "token *** ok"}},
		{"a secret split by a colour code is still replaced", []string{"pass hun\x1b[0mter2"}, secrets, []string{"pass ***"}},
		{"colour codes and control characters are removed", []string{"\x1b[31mERROR\x1b[0m: bad\x07 \x1b]0;title\x07value\r"}, nil,
			[]string{"ERROR: bad value"}},
		{"a tab is a space and blank lines go", []string{"a\tb", "", "   "}, nil, []string{"a b"}},
		{"only the last 10 lines are kept", numbered(15), nil, numbered(15)[5:]},
		{"a long line is cut at 200 runes", []string{strings.Repeat("é", 300)}, nil, []string{strings.Repeat("é", 199) + "…"}},
		{"the oldest lines go past 2 KiB", wide(6), nil, wide(6)[1:]},
		{"a secret shorter than 4 characters withholds the whole output", []string{"fine", "pin abc"}, []string{"abc"},
			[]string{"(withheld: it may hold a secret value)"}},
		{"a short secret that does not appear withholds nothing", []string{"fine"}, []string{"xyz"}, []string{"fine"}},
		{"invalid UTF-8 is replaced", []string{"bad \xff byte"}, nil, []string{"bad \uFFFD byte"}},
		{"no output is nil", nil, secrets, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := redactOutput(tc.lines, tc.secrets)
			if !slices.Equal(got, tc.want) {
				t.Errorf("redactOutput:\n got %q\nwant %q", got, tc.want)
			}
			if size(got) > maxLogBytes || len(got) > maxLogLines {
				t.Errorf("%d lines, %d bytes: over the bounds", len(got), size(got))
			}
		})
	}
}

func numbered(n int) []string {
	var out []string
	for i := range n {
		out = append(out, "line "+string(rune('a'+i)))
	}
	return out
}

// wide is n lines of 397 bytes each.
func wide(n int) []string {
	var out []string
	for i := range n {
		out = append(out, string(rune('a'+i))+strings.Repeat("é", 198))
	}
	return out
}
