package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxReturn is the longest return path sign-in keeps, in bytes (before and
// after escaping): the sign-in cookie carries it, and a browser drops a
// cookie over 4 KiB.
const maxReturn = 2048

// lookalikeSlashes are characters a Unicode normalisation (NFKC) or a
// careless proxy may turn into a slash or a backslash.
var lookalikeSlashes = []rune{'\u2044', '\u2215', '\u2216', '\u29f5', '\u29f8', '\ufe68', '\uff0f', '\uff3c'}

// safeReturn is where sign-in sends the browser back to: returnPath on
// this dashboard's public URL.
func (s *Server) safeReturn(p string) string { return returnPath(s.public, p) }

// returnPath keeps a return value on the dashboard at origin: it accepts
// only a path with one leading slash (and a query and a fragment) that a
// browser cannot resolve anywhere else, and returns it re-serialised as a
// canonical, escaped path+query+fragment, so what is sent is what was
// checked. Anything else gives "/": any C0 control, space or DEL (browsers
// strip TAB, CR and LF, and leading controls, so "/<TAB>/evil" becomes
// "//evil"), a backslash (browsers read it as a slash), Unicode whitespace,
// invisible characters and look-alike slashes, invalid UTF-8, a scheme or
// host, an escaped slash or backslash or doubly escaped character in the
// path, an empty or dot segment (which "/..//evil" turns into two leading
// slashes once resolved), a broken escape, and a value over maxReturn bytes.
// Last, the path is resolved against origin and must keep its scheme and
// host.
func returnPath(origin *url.URL, p string) string {
	const home = "/"
	if len(p) > maxReturn || !utf8.ValidString(p) || strings.IndexFunc(p, forbiddenInReturn) >= 0 {
		return home
	}
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") {
		return home
	}
	rawPath, _, _ := strings.Cut(p, "?")
	rawPath, _, _ = strings.Cut(rawPath, "#")
	if lower := strings.ToLower(rawPath); strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") {
		return home
	}
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return home
	}
	if !cleanReturnPath(u.Path) || !cleanDecoded(u.Fragment) {
		return home
	}
	query, ok := canonicalQuery(u.RawQuery)
	if !ok {
		return home
	}
	out := (&url.URL{Path: u.Path, RawQuery: query, Fragment: u.Fragment}).String()
	if len(out) > maxReturn {
		return home
	}
	ref, err := url.Parse(out)
	if err != nil || ref.Scheme != "" || ref.Host != "" || ref.User != nil {
		return home
	}
	if res := origin.ResolveReference(ref); res.Scheme != origin.Scheme || res.Host != origin.Host || res.User != nil {
		return home
	}
	return out
}

// forbiddenInReturn reports a character no return value may hold raw, nor
// its path escaped.
func forbiddenInReturn(r rune) bool {
	switch {
	case r <= ' ' || r == 0x7f || r == '\\':
		return true
	case r < utf8.RuneSelf:
		return false
	case r == utf8.RuneError || unicode.IsSpace(r) || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp):
		return true
	}
	return slices.Contains(lookalikeSlashes, r)
}

// cleanDecoded reports whether a decoded query or fragment is valid UTF-8
// with no control character (a space, escaped, is search text there).
func cleanDecoded(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

// cleanReturnPath reports whether a decoded path is one leading slash and
// segments that are neither empty (but the last) nor dot segments, with no
// forbidden character and no percent sign (a doubly escaped character).
func cleanReturnPath(p string) bool {
	if !strings.HasPrefix(p, "/") || !utf8.ValidString(p) || strings.IndexFunc(p, forbiddenInReturn) >= 0 || strings.Contains(p, "%") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, seg := range segs {
		if (seg == "" && i < len(segs)-1) || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// canonicalQuery checks a raw query (its escapes well formed, its decoded
// text clean) and returns it with every byte outside RFC 3986's query
// characters escaped and every escape in upper case.
func canonicalQuery(raw string) (string, bool) {
	var b, decoded strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c == '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return "", false
			}
			v := unhex(raw[i+1])<<4 | unhex(raw[i+2])
			b.WriteByte('%')
			b.WriteString(strings.ToUpper(raw[i+1 : i+3]))
			decoded.WriteByte(v)
			i += 2
		case queryByte(c):
			b.WriteByte(c)
			decoded.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
			decoded.WriteByte(c)
		}
	}
	if !cleanDecoded(decoded.String()) {
		return "", false
	}
	return b.String(), true
}

// queryByte reports whether c may stand unescaped in a query (RFC 3986:
// unreserved, sub-delims, ':', '@', '/', '?').
func queryByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/?", c) >= 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// seeOther answers 303 with Location loc, a path safeReturn made, as it
// is: http.Redirect would clean the path again, and with no query its
// cleaning reaches into the fragment.
func seeOther(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
}
