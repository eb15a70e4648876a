package events

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxTokenLength is the longest namespace, name, device id or identity
// subject a subject or KV key may carry. It is the Kubernetes DNS-label limit,
// so every valid namespace fits; Deployment and TaskRun names must be DNS
// labels too (no dots), which the CRDs enforce.
const MaxTokenLength = 63

// Token kinds, as they appear in TokenError.Kind.
const (
	TokenNamespace       = "namespace"
	TokenName            = "name"
	TokenDevice          = "device"
	TokenIdentitySubject = "identity subject"
)

// ValidateToken checks one subject or KV-key token of the given kind. A token
// must be 1 to MaxTokenLength characters from [A-Za-z0-9_-]: that excludes
// the NATS separator '.', the wildcards '*' and '>', whitespace, and every
// character a KV key may not hold. The error is a *TokenError naming the
// token and the rule it breaks.
func ValidateToken(kind, value string) error {
	fail := func(rule string) error { return &TokenError{Kind: kind, Value: value, Rule: rule} }
	switch {
	case value == "":
		return fail("must not be empty")
	case utf8.RuneCountInString(value) > MaxTokenLength:
		return fail("must be at most 63 characters (a DNS label); shorten it")
	case strings.ContainsFunc(value, unicode.IsSpace):
		return fail("must not contain whitespace")
	case strings.Contains(value, "."):
		return fail("must not contain '.', the NATS subject separator; use '-' instead")
	case strings.Contains(value, "*"):
		return fail("must not contain '*', a NATS wildcard")
	case strings.Contains(value, ">"):
		return fail("must not contain '>', a NATS wildcard")
	}
	for _, r := range value {
		if !isTokenRune(r) {
			return fail("may contain only letters, digits, '-' and '_'; found " + quoteRune(r))
		}
	}
	return nil
}

func isTokenRune(r rune) bool {
	return r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}

func quoteRune(r rune) string { return strconv.QuoteRune(r) }
