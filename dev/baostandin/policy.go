package baostandin

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
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

// legacyCapabilities maps the old `policy = "…"` form to capabilities, as
// OpenBao does.
var legacyCapabilities = map[string][]string{
	"deny":  {"deny"},
	"read":  {"read", "list"},
	"write": {"read", "list", "create", "update", "delete"},
	"sudo":  {"read", "list", "create", "update", "delete", "sudo"},
}

// parsePolicy parses the HCL of an ACL policy: path blocks with a
// capabilities list (or the legacy policy string). Keys the stand-in does
// not model (allowed_parameters, min_wrapping_ttl, …) are refused rather
// than ignored, so a test never passes on a rule OpenBao would enforce.
func parsePolicy(name, text string) (*policy, error) {
	file, err := hcl.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("failed to parse policy: %w", err)
	}
	list, ok := file.Node.(*ast.ObjectList)
	if !ok {
		return nil, errors.New("failed to parse policy: does not contain a root object")
	}
	p := &policy{name: name, raw: text}
	for _, item := range list.Items {
		if len(item.Keys) != 2 || keyText(item.Keys[0]) != "path" {
			return nil, fmt.Errorf("failed to parse policy: invalid key %q: only path \"…\" { … } blocks", keyText(item.Keys[0]))
		}
		pattern := keyText(item.Keys[1])
		if strings.Contains(strings.TrimSuffix(pattern, "*"), "*") {
			return nil, fmt.Errorf("failed to parse policy: path %q: a * is only allowed at the end", pattern)
		}
		body, ok := item.Val.(*ast.ObjectType)
		if !ok {
			return nil, fmt.Errorf("failed to parse policy: path %q: not a block", pattern)
		}
		var caps []string
		for _, f := range body.List.Items {
			switch key := keyText(f.Keys[0]); key {
			case "capabilities":
				var c []string
				if err := hcl.DecodeObject(&c, f.Val); err != nil {
					return nil, fmt.Errorf("failed to parse policy: path %q: capabilities: %w", pattern, err)
				}
				caps = append(caps, c...)
			case "policy":
				var legacy string
				if err := hcl.DecodeObject(&legacy, f.Val); err != nil || legacyCapabilities[legacy] == nil {
					return nil, fmt.Errorf("failed to parse policy: path %q: policy must be deny, read, write or sudo", pattern)
				}
				caps = append(caps, legacyCapabilities[legacy]...)
			default:
				return nil, fmt.Errorf("failed to parse policy: path %q: the OpenBao stand-in does not model %q", pattern, key)
			}
		}
		for _, c := range caps {
			if !slices.Contains(knownCapabilities, c) {
				return nil, fmt.Errorf("failed to parse policy: path %q: unknown capability %q", pattern, c)
			}
		}
		p.rules = append(p.rules, rule{pattern: strings.TrimPrefix(pattern, "/"), caps: caps})
	}
	return p, nil
}

// keyText is an object key's text, unquoted.
func keyText(k *ast.ObjectKey) string {
	if v, ok := k.Token.Value().(string); ok {
		return v
	}
	return k.Token.Text
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
