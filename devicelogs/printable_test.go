package devicelogs_test

import (
	"testing"

	"github.com/nationtech/harmony-fleet/devicelogs"
)

func TestPrintableLine(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain text is kept", "GET /api 200", "GET /api 200"},
		{"a tab is kept", "a\tb", "a\tb"},
		{"a clear-screen escape is shown, not run", "\x1b[2Jhi", `\x1b[2Jhi`},
		{"an OSC title sequence is shown", "\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"a carriage return cannot overwrite the line", "ok\rFAKE", `ok\x0dFAKE`},
		{"invalid UTF-8 is replaced", "a\xff\xfeb", "a\uFFFDb"},
		{"a C1 control is shown", "a\u009bb", `a\x9bb`},
		{"a right-to-left override is shown", "abc\u202edcb", `abc\u202edcb`},
		{"a backslash is doubled so nothing forged looks escaped", `\x1b`, `\\x1b`},
		{"unicode text is kept", "héllo 世界", "héllo 世界"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := devicelogs.PrintableLine(tc.in); got != tc.want {
				t.Fatalf("PrintableLine(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
