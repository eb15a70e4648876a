// Package alerts holds Harmony Fleet's Prometheus alert rules: the
// PrometheusRule manifest fleet-alerts.yaml (for a cluster with the
// Prometheus Operator), whose spec.groups is the one source of the rules,
// and RuleFile, which turns it into Prometheus's plain rule file format (for
// promtool and a Prometheus without the operator). The runbook of every
// alert is a section of docs/alerts.md.
//
// The package's tests run promtool (built by `task setup:promtool`) over the
// extracted rules and the unit tests of fleet-alerts_test.yaml. Nothing in
// the product imports it.
package alerts

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// Manifest is fleet-alerts.yaml: the PrometheusRule fleet-system/fleet-alerts.
//
//go:embed fleet-alerts.yaml
var Manifest []byte

// RunbookBase is where every alert's runbook_url points, followed by the
// anchor of the alert's section.
const RunbookBase = "https://github.com/nationtech/harmony-fleet/blob/main/docs/alerts.md#"

// PrometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule
// this package reads.
type PrometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []Group `json:"groups"`
	} `json:"spec"`
}

// Group is a rule group.
type Group struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is an alerting rule (Alert set) or a recording rule (Record set).
type Rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Parse reads a PrometheusRule manifest.
func Parse(manifest []byte) (*PrometheusRule, error) {
	var pr PrometheusRule
	if err := yaml.Unmarshal(manifest, &pr); err != nil {
		return nil, fmt.Errorf("alerts: parse the PrometheusRule: %w", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		return nil, fmt.Errorf("alerts: the manifest is a %s %s, not a monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	return &pr, nil
}

// RuleFile returns the spec.groups of a PrometheusRule manifest as a plain
// Prometheus rule file ("groups:" at the top), every field kept as written.
func RuleFile(manifest []byte) ([]byte, error) {
	if _, err := Parse(manifest); err != nil {
		return nil, err
	}
	var raw struct {
		Spec struct {
			Groups json.RawMessage `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(manifest, &raw); err != nil {
		return nil, fmt.Errorf("alerts: parse the PrometheusRule: %w", err)
	}
	if len(raw.Spec.Groups) == 0 || string(raw.Spec.Groups) == "null" {
		return nil, errors.New("alerts: the PrometheusRule has no spec.groups")
	}
	j, err := json.Marshal(map[string]json.RawMessage{"groups": raw.Spec.Groups})
	if err != nil {
		return nil, fmt.Errorf("alerts: encode the rule groups: %w", err)
	}
	out, err := yaml.JSONToYAML(j)
	if err != nil {
		return nil, fmt.Errorf("alerts: encode the rule groups: %w", err)
	}
	return out, nil
}

// Alerts returns the alerting rules of every group, in order.
func (pr *PrometheusRule) Alerts() []Rule {
	var out []Rule
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// Problems lists what the house requires of every alerting rule and pr
// lacks: a severity label of warning or critical; summary and description
// annotations; a runbook_url annotation of RunbookBase followed by the
// alert's name in lower case, an anchor that must be among anchors (the
// headings of the runbook, see Anchors). None is nil.
func (pr *PrometheusRule) Problems(anchors map[string]bool) []string {
	var out []string
	for _, r := range pr.Alerts() {
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			out = append(out, fmt.Sprintf("%s: severity label %q, want warning or critical", r.Alert, s))
		}
		for _, a := range []string{"summary", "description"} {
			if strings.TrimSpace(r.Annotations[a]) == "" {
				out = append(out, fmt.Sprintf("%s: no %s annotation", r.Alert, a))
			}
		}
		url, ok := r.Annotations["runbook_url"]
		want := RunbookBase + strings.ToLower(r.Alert)
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: no runbook_url annotation, want %s", r.Alert, want))
		case url != want:
			out = append(out, fmt.Sprintf("%s: runbook_url %s, want %s", r.Alert, url, want))
		case !anchors[strings.ToLower(r.Alert)]:
			out = append(out, fmt.Sprintf("%s: the runbook has no section with the anchor #%s", r.Alert, strings.ToLower(r.Alert)))
		}
	}
	return out
}

var (
	heading = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	// notInSlug is what GitHub drops from a heading to make its anchor.
	notInSlug = regexp.MustCompile(`[^\p{L}\p{N}\p{M}_ -]`)
)

// Anchors returns the anchors GitHub gives the headings of a Markdown
// document (lower case, punctuation dropped, spaces as hyphens; a repeated
// heading gets -1, -2, …). Headings inside fenced code blocks are not
// headings.
func Anchors(markdown []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for line := range strings.SplitSeq(string(markdown), "\n") {
		trimmed := strings.TrimSpace(line)
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := strings.ReplaceAll(m[1], "`", "")
		slug := strings.ReplaceAll(notInSlug.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}
