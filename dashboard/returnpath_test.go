package dashboard

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// ReturnCase is one return value sign-in may be given (the return query
// parameter of /login, the return field of the mock sign-in form) and where
// sign-in must send the browser afterwards.
type ReturnCase struct {
	// Name says what the value tries, in a sentence.
	Name string
	// Return is the value as the browser sends it (decoded).
	Return string
	// Want is the Location sign-in answers with: the value re-serialised
	// as a canonical, escaped path on the dashboard, or "/".
	Want string
}

// ReturnCases is the dashboard's attack suite for the return after sign-in:
// the hostile values (each aimed at the host evil, each must fall back to
// /) and the dashboard's own paths, which must be kept (re-escaped). The
// unit test, the sign-in handlers' tests and the Chromium test all run it,
// so a case added here is checked against the real browser too.
func ReturnCases(evil string) []ReturnCase {
	var cs []ReturnCase
	hostile := func(name, ret string) {
		cs = append(cs, ReturnCase{Name: name + " goes to the overview", Return: ret, Want: "/"})
	}
	kept := func(name, ret, want string) {
		cs = append(cs, ReturnCase{Name: name, Return: ret, Want: want})
	}

	kept("the overview is kept", "/", "/")
	kept("a local path is kept", "/devices/d1?command=x", "/devices/d1?command=x")
	kept("a path with a query and a fragment is kept", "/deployments/lab/x?tab=plan#events", "/deployments/lab/x?tab=plan#events")
	kept("a trailing slash is kept", "/devices/", "/devices/")
	kept("a query of several parameters is kept in its order", "/alerts?sort=age&page=2", "/alerts?sort=age&page=2")
	kept("an escaped space in the query is kept", "/devices?q=a%20b", "/devices?q=a%20b")
	kept("a non-ASCII letter in the path is escaped", "/devices/d\u00e9", "/devices/d%C3%A9")
	kept("an escaped non-ASCII letter in the path is kept", "/devices/d%C3%A9", "/devices/d%C3%A9")
	kept("quotes and angle brackets in the query are escaped", `/devices?q="<x>"`, "/devices?q=%22%3Cx%3E%22")
	kept("a fragment with dot segments is kept as it is", "/devices#events/../x", "/devices#events/../x")
	kept("two slashes in the query are only query text", "/devices?next=//"+evil+"/x", "/devices?next=//"+evil+"/x")
	kept("two slashes in the fragment are only fragment text", "/devices#//"+evil+"/x", "/devices#//"+evil+"/x")
	kept("a scheme after the first slash is a path", "/javascript:alert(1)", "/javascript:alert%281%29")
	kept("an at sign after the first slash is a path", "/@"+evil+"/x", "/@"+evil+"/x")

	// Every C0 control character and DEL, at each place a browser strips,
	// keeps or trips over it.
	for c := rune(0); c <= 0x7f; c++ {
		if c == 0x20 {
			c = 0x7f
		}
		ch := string(c)
		what := fmt.Sprintf("the control character %#02x", c)
		hostile(what+" before two slashes", ch+"//"+evil+"/x")
		hostile(what+" between the two slashes", "/"+ch+"/"+evil+"/x")
		hostile(what+" between a slash and a backslash", "/"+ch+"\\"+evil+"/x")
		hostile(what+" between a backslash and a slash", "\\"+ch+"/"+evil+"/x")
		hostile(what+" after two slashes", "//"+ch+evil+"/x")
		hostile(what+" inside a scheme", "java"+ch+"script:alert(1)")
		hostile(what+" inside the path", "/devices"+ch+"/d1")
		hostile(what+" at the end", "/devices"+ch)
		hostile(what+" in the query", "/devices?q="+ch)
		hostile(what+" in the fragment", "/devices#"+ch)
		hostile(what+" escaped between the two slashes", "/"+url.PathEscape(ch)+"/"+evil+"/x")
	}
	hostile("a header injection", "/x\r\nSet-Cookie: a=b")
	hostile("an escaped line feed in the query", "/devices?q=%0A")
	hostile("an escaped NUL in the fragment", "/devices#%00")
	hostile("an escaped DEL in the query", "/devices?q=%7F")
	hostile("a space before two slashes", " //"+evil+"/x")
	hostile("a space between the two slashes", "/ /"+evil+"/x")
	hostile("a space at the end", "/devices ")

	// Backslashes: a browser reads \ as / in an http(s) URL.
	hostile("a slash and a backslash", "/\\"+evil+"/x")
	hostile("a backslash and a slash", "\\/"+evil+"/x")
	hostile("two backslashes", "\\\\"+evil+"/x")
	hostile("a slash, a backslash and a slash", "/\\/"+evil+"/x")
	hostile("a backslash inside the path", "/devices\\d1")
	hostile("a backslash in the query", "/devices?q=\\")

	// Scheme-relative and absolute forms.
	hostile("a scheme-relative URL", "//"+evil+"/x")
	hostile("three slashes", "///"+evil+"/x")
	hostile("four slashes", "////"+evil+"/x")
	hostile("an absolute https URL", "https://"+evil+"/x")
	hostile("an absolute http URL in capitals", "HTTP://"+evil+"/x")
	hostile("a scheme with no slashes", "https:"+evil+"/x")
	hostile("a scheme with one slash", "http:/"+evil+"/x")
	hostile("a scheme with backslashes", "http:\\\\"+evil+"/x")
	hostile("a javascript: URL", "javascript:alert(document.domain)")
	hostile("a javascript: URL in mixed case", "JaVaScRiPt:alert(1)")
	hostile("a data: URL", "data:text/html,<script>alert(1)</script>")
	hostile("a user-info trick", "//user@"+evil+"/x")

	// Dot segments that leave two slashes at the start once resolved.
	hostile("a dot segment before two slashes", "/.//"+evil+"/x")
	hostile("a parent segment before two slashes", "/..//"+evil+"/x")
	hostile("a parent segment inside the path before two slashes", "/x/..//"+evil+"/x")
	hostile("an escaped parent segment before two slashes", "/%2e%2e//"+evil+"/x")
	hostile("a dot segment", "/./devices")

	// Percent-encoded forms.
	hostile("escaped slashes", "/%2F%2F"+evil+"/x")
	hostile("escaped slashes in lower case", "/%2f%2f"+evil+"/x")
	hostile("an escaped slash after the first", "/%2F/"+evil+"/x")
	hostile("an escaped slash inside the path", "/devices%2Fd1")
	hostile("an escaped backslash", "/%5C"+evil+"/x")
	hostile("escaped backslashes in lower case", "/%5c%5c"+evil+"/x")
	hostile("doubly escaped slashes", "/%252F%252F"+evil+"/x")
	hostile("escaped slashes with no leading slash", "%2F%2F"+evil+"/x")
	hostile("an escaped ideographic space", "/%E3%80%80/"+evil+"/x")
	hostile("an escaped overlong slash", "/%C0%AF"+evil+"/x")
	hostile("a broken escape in the path", "/devices%ZZ")
	hostile("a broken escape in the query", "/devices?q=%ZZ")
	hostile("a broken escape in the fragment", "/devices#%ZZ")

	// Unicode whitespace, invisible and look-alike characters.
	for _, r := range []struct {
		r    rune
		name string
	}{
		{0x85, "NEXT LINE"}, {0xa0, "NO-BREAK SPACE"}, {0x1680, "OGHAM SPACE MARK"}, {0x2000, "EN QUAD"},
		{0x200b, "ZERO WIDTH SPACE"}, {0x200e, "LEFT-TO-RIGHT MARK"}, {0x2028, "LINE SEPARATOR"},
		{0x2029, "PARAGRAPH SEPARATOR"}, {0x202e, "RIGHT-TO-LEFT OVERRIDE"}, {0x202f, "NARROW NO-BREAK SPACE"},
		{0x205f, "MEDIUM MATHEMATICAL SPACE"}, {0x3000, "IDEOGRAPHIC SPACE"}, {0xfeff, "ZERO WIDTH NO-BREAK SPACE"},
	} {
		ch := string(r.r)
		hostile(fmt.Sprintf("a %s (U+%04X) before two slashes", r.name, r.r), ch+"//"+evil+"/x")
		hostile(fmt.Sprintf("a %s (U+%04X) between the two slashes", r.name, r.r), "/"+ch+"/"+evil+"/x")
		hostile(fmt.Sprintf("a %s (U+%04X) inside the path", r.name, r.r), "/devices"+ch)
	}
	hostile("a fullwidth solidus", "/\uff0f"+evil+"/x")
	hostile("two fullwidth solidi", "\uff0f\uff0f"+evil+"/x")
	hostile("a fullwidth reverse solidus", "/\uff3c"+evil+"/x")
	hostile("a division slash", "/\u2215"+evil+"/x")
	hostile("a fraction slash", "/\u2044"+evil+"/x")
	hostile("invalid UTF-8", "/\xff/"+evil+"/x")
	hostile("an overlong slash in UTF-8", "/\xc0\xaf"+evil+"/x")

	// Not a path.
	hostile("an empty return", "")
	hostile("a relative path", "devices")
	hostile("a relative host-like path", evil+"/x")
	hostile("a query alone", "?x=1")
	hostile("a fragment alone", "#x")
	hostile("a return longer than the limit", "/"+strings.Repeat("a", maxReturn))
	return cs
}

// testOrigin is the public URL the unit tests resolve returns against.
var testOrigin = &url.URL{Scheme: "https", Host: "fleet.example.com"}

func TestTheReturnAfterSignInStaysOnTheDashboard(t *testing.T) {
	for _, tc := range ReturnCases("evil.example") {
		t.Run(tc.Name, func(t *testing.T) {
			got := returnPath(testOrigin, tc.Return)
			if got != tc.Want {
				t.Fatalf("returnPath(%q) = %q, want %q", tc.Return, got, tc.Want)
			}
			// What is sent is canonical: printable ASCII, one leading
			// slash, and the check keeps it as it is.
			for i := 0; i < len(got); i++ {
				if got[i] <= 0x20 || got[i] >= 0x7f || got[i] == '\\' {
					t.Errorf("returnPath(%q) = %q: byte %#02x at %d is not printable ASCII", tc.Return, got, got[i], i)
				}
			}
			if !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") {
				t.Errorf("returnPath(%q) = %q: not a path with one leading slash", tc.Return, got)
			}
			if again := returnPath(testOrigin, got); again != got {
				t.Errorf("returnPath(%q) = %q, but returnPath(%q) = %q: not canonical", tc.Return, got, got, again)
			}
			res, err := testOrigin.Parse(got)
			if err != nil || res.Scheme != testOrigin.Scheme || res.Host != testOrigin.Host {
				t.Errorf("returnPath(%q) = %q resolves to %v (%v), off %s", tc.Return, got, res, err, testOrigin)
			}
		})
	}
}

func TestTheReturnSuiteCoversEveryControlCharacter(t *testing.T) {
	// The suite must put each C0 control and DEL between the two slashes
	// (the reported bypass was a TAB there).
	seen := map[string]bool{}
	for _, tc := range ReturnCases("evil.example") {
		seen[tc.Return] = true
	}
	for c := rune(0); c < 0x20; c++ {
		if !seen["/"+string(c)+"/evil.example/x"] {
			t.Errorf("no case puts %#02x between the two slashes", c)
		}
	}
	if !seen["/\x7f/evil.example/x"] {
		t.Error("no case puts DEL between the two slashes")
	}
}
