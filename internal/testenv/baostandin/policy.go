package baostandin

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl"
)

// capabilities OpenBao's ACL policies know.
var knownCapabilities = []string{"create", "read", "update", "patch", "delete", "list", "sudo", "deny"}

// rule is one `path "…" { capabilities = [...] }` block.
type rule struct {
	pattern string
	caps    []string
}

// policy is a parsed ACL policy.
type policy struct {
	name  string
	raw   string
	rules []rule
}

// parsePolicy parses the HCL of an ACL policy: path blocks with a
// capabilities list. Other keys are refused rather than ignored.
func parsePolicy(name, text string) (*policy, error) {
	var doc struct {
		Path map[string]struct {
			Capabilities []string `hcl:"capabilities"`
		} `hcl:"path"`
	}
	if err := hcl.Decode(&doc, text); err != nil {
		return nil, fmt.Errorf("failed to parse policy: %w", err)
	}
	p := &policy{name: name, raw: text}
	for pattern, body := range doc.Path {
		if strings.Contains(strings.TrimSuffix(pattern, "*"), "*") {
			return nil, fmt.Errorf("failed to parse policy: path %q: a * is only allowed at the end", pattern)
		}
		for _, c := range body.Capabilities {
			if !slices.Contains(knownCapabilities, c) {
				return nil, fmt.Errorf("failed to parse policy: path %q: unknown capability %q", pattern, c)
			}
		}
		p.rules = append(p.rules, rule{pattern: strings.TrimPrefix(pattern, "/"), caps: body.Capabilities})
	}
	return p, nil
}

// match reports whether pattern matches path and, when it does, how
// specific the match is (higher is more specific): exact matches beat
// globs, longer literal prefixes beat shorter ones, fewer `+` beat more.
func match(pattern, path string) (bool, int) {
	glob := strings.HasSuffix(pattern, "*")
	pat := strings.TrimSuffix(pattern, "*")
	pSegs := strings.Split(pat, "/")
	xSegs := strings.Split(path, "/")
	plus := 0
	for i, seg := range pSegs {
		last := i == len(pSegs)-1
		if i >= len(xSegs) {
			return false, 0
		}
		switch {
		case seg == "+":
			plus++
		case last && glob:
			if !strings.HasPrefix(xSegs[i], seg) {
				return false, 0
			}
		case seg != xSegs[i]:
			return false, 0
		}
	}
	if !glob && len(xSegs) != len(pSegs) {
		return false, 0
	}
	if glob {
		return true, 1_000*len(pat) - plus
	}
	return true, 1_000_000 + 1_000*len(pat) - plus
}

// allowed reports whether the policies grant capability on path: the most
// specific matching path across the policies decides (capabilities of
// equally specific paths are merged), and deny there refuses.
func allowed(policies []*policy, path, capability string) bool {
	best := -1
	var caps []string
	for _, p := range policies {
		for _, r := range p.rules {
			ok, score := match(r.pattern, path)
			switch {
			case !ok || score < best:
			case score > best:
				best, caps = score, slices.Clone(r.caps)
			default:
				caps = append(caps, r.caps...)
			}
		}
	}
	if best < 0 || slices.Contains(caps, "deny") {
		return false
	}
	return slices.Contains(caps, capability)
}
