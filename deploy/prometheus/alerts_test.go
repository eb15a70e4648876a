package alerts_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/nationtech/harmony-fleet/authcallout"
	alerts "github.com/nationtech/harmony-fleet/deploy/prometheus"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/metrics"
	"github.com/nationtech/harmony-fleet/operator"
)

// promtoolVersion is the Prometheus module version tools/promtool/go.mod
// pins and Taskfile.yml's PROMTOOL_VERSION names (TestThePromtoolVersionIsOneVersion).
const promtoolVersion = "v0.316.0"

// unitTests is the promtool unit test file of the rules.
const unitTests = "fleet-alerts_test.yaml"

// wantAlerts are the alerts docs/alerts.md describes.
var wantAlerts = []string{
	"FleetAuthCalloutRefusalsSpiking", "FleetAuthCalloutSlow", "FleetDeploymentDegraded", "FleetDevicesNeverConnected", "FleetDevicesStale", "FleetOperatorNoLeader",
	"FleetRolloutFailed", "FleetRolloutProgressDeadlineExceeded", "FleetRolloutRunnerCheckpointBehind", "FleetRolloutRunnerNotLive", "FleetRolloutStuck",
	"FleetSkippedRecords",
}

// promtool finds the promtool built by `task setup:promtool`: $FLEET_PROMTOOL,
// else the cached build.
func promtool(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FLEET_PROMTOOL")
	if path == "" {
		path = filepath.Join("..", "..", ".cache", "tools", "promtool-"+promtoolVersion, "promtool")
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		_, err = exec.LookPath(abs)
	}
	if err != nil {
		testenv.Missing(t, "promtool "+promtoolVersion, "go tool -modfile=tools/go.mod task setup:promtool", err)
	}
	return abs
}

// run runs promtool with args in dir and returns its combined output and
// whether it exited 0; a promtool that does not run at all fails the test.
func run(t *testing.T, bin, dir string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), true
	case errors.As(err, &ee) && ctx.Err() == nil:
		return string(out), false
	default:
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		return "", false
	}
}

// ruleFileName is the name fleet-alerts_test.yaml's rule_files gives the
// extracted rules.
func ruleFileName(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(unitTests)
	if err != nil {
		t.Fatal(err)
	}
	var ut struct {
		RuleFiles []string `json:"rule_files"`
	}
	if err := yaml.Unmarshal(b, &ut); err != nil {
		t.Fatalf("%s: %v", unitTests, err)
	}
	if len(ut.RuleFiles) != 1 || filepath.Base(ut.RuleFiles[0]) != ut.RuleFiles[0] {
		t.Fatalf("%s: rule_files %q, want one file name (the rules extracted next to it)", unitTests, ut.RuleFiles)
	}
	return ut.RuleFiles[0]
}

// workDir writes rules under the name the unit tests load and, when tests
// is not nil, the unit tests next to it, into a new folder.
func workDir(t *testing.T, rules, tests []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ruleFileName(t)), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if tests != nil {
		if err := os.WriteFile(filepath.Join(dir, unitTests), tests, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func ruleFile(t *testing.T) []byte {
	t.Helper()
	b, err := alerts.RuleFile(alerts.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unitTestFile(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(unitTests)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTheManifestIsThePrometheusRuleFleetAlerts(t *testing.T) {
	pr, err := alerts.Parse(alerts.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Metadata.Namespace != "fleet-system" || pr.Metadata.Name != "fleet-alerts" || pr.Metadata.Labels["role"] != "alert-rules" {
		t.Errorf("metadata %+v, want fleet-system/fleet-alerts labelled role: alert-rules", pr.Metadata)
	}
	var names []string
	for _, r := range pr.Alerts() {
		if !slices.Contains(names, r.Alert) {
			names = append(names, r.Alert)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, wantAlerts) {
		t.Errorf("alerts %q, want %q", names, wantAlerts)
	}
}

func TestTheRuleFileIsTheManifestsGroups(t *testing.T) {
	var got struct {
		Groups []alerts.Group `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(ruleFile(t), &got); err != nil {
		t.Fatalf("the rule file does not read as {groups: [...]}: %v", err)
	}
	pr, err := alerts.Parse(alerts.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Groups) != len(pr.Spec.Groups) || len(got.Groups) == 0 {
		t.Fatalf("%d groups, want the manifest's %d", len(got.Groups), len(pr.Spec.Groups))
	}
	for i, g := range got.Groups {
		if g.Name != pr.Spec.Groups[i].Name || len(g.Rules) != len(pr.Spec.Groups[i].Rules) {
			t.Errorf("group %d is %s with %d rules, want %s with %d", i, g.Name, len(g.Rules), pr.Spec.Groups[i].Name, len(pr.Spec.Groups[i].Rules))
		}
	}
}

func TestTheRuleFileRefusesWhatIsNotAPrometheusRule(t *testing.T) {
	for _, tc := range []struct {
		name, manifest string
	}{
		{"a ConfigMap is not a PrometheusRule", "apiVersion: v1\nkind: ConfigMap\nspec:\n  groups: []\n"},
		{"a PrometheusRule without groups has no rules", "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nspec: {}\n"},
		{"text that is not YAML does not parse", "apiVersion: [\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := alerts.RuleFile([]byte(tc.manifest)); err == nil {
				t.Errorf("RuleFile = %q, want an error", b)
			}
		})
	}
}

// runbookAnchors reads the anchors of docs/alerts.md.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	return alerts.Anchors(b)
}

func TestEveryAlertHasASeveritySummaryDescriptionAndRunbookSection(t *testing.T) {
	pr, err := alerts.Parse(alerts.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pr.Problems(runbookAnchors(t)) {
		t.Error(p)
	}
}

func TestTheRuleChecksFindWhatIsMissing(t *testing.T) {
	good := alerts.Rule{Alert: "FleetDevicesStale", Expr: "vector(1)", Labels: map[string]string{"severity": "warning"},
		Annotations: map[string]string{"summary": "s", "description": "d", "runbook_url": alerts.RunbookBase + "fleetdevicesstale"}}
	for _, tc := range []struct {
		name   string
		change func(r *alerts.Rule)
		want   string // in the one problem; "" for none
	}{
		{"a complete alert has no problem", func(*alerts.Rule) {}, ""},
		{"an alert without a runbook_url is refused", func(r *alerts.Rule) { delete(r.Annotations, "runbook_url") }, "no runbook_url"},
		{"a runbook_url to another alert's section is refused", func(r *alerts.Rule) { r.Annotations["runbook_url"] = alerts.RunbookBase + "fleetrolloutstuck" }, "want " + alerts.RunbookBase + "fleetdevicesstale"},
		{"an alert whose section the runbook lacks is refused", func(r *alerts.Rule) {
			r.Alert = "FleetNoSuchAlert"
			r.Annotations["runbook_url"] = alerts.RunbookBase + "fleetnosuchalert"
		}, "no section with the anchor #fleetnosuchalert"},
		{"a severity of info is refused", func(r *alerts.Rule) { r.Labels["severity"] = "info" }, `severity label "info"`},
		{"an alert without a summary is refused", func(r *alerts.Rule) { delete(r.Annotations, "summary") }, "no summary"},
		{"an alert with a blank description is refused", func(r *alerts.Rule) { r.Annotations["description"] = " " }, "no description"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			r.Labels, r.Annotations = map[string]string{}, map[string]string{}
			for k, v := range good.Labels {
				r.Labels[k] = v
			}
			for k, v := range good.Annotations {
				r.Annotations[k] = v
			}
			tc.change(&r)
			var pr alerts.PrometheusRule
			pr.Spec.Groups = []alerts.Group{{Name: "g", Rules: []alerts.Rule{r, {Record: "fleet:recorded", Expr: "vector(1)"}}}}
			got := pr.Problems(runbookAnchors(t))
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one with %q", got, tc.want)
			}
		})
	}
}

func TestAnchorsAreGitHubs(t *testing.T) {
	for _, tc := range []struct {
		name, markdown string
		want           []string
	}{
		{"a heading is lower-cased", "## FleetDevicesStale\n", []string{"fleetdevicesstale"}},
		{"punctuation goes and spaces become hyphens", "## Loading the rules: plain Prometheus (`spec.groups`)\n", []string{"loading-the-rules-plain-prometheus-specgroups"}},
		{"a repeated heading is numbered", "# A\n## A\n", []string{"a", "a-1"}},
		{"a comment in a fenced block is no heading", "```sh\n# FleetDevicesStale\n```\n## Real\n", []string{"real"}},
		{"a hash without a space is no heading", "#hashtag\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for a := range alerts.Anchors([]byte(tc.markdown)) {
				got = append(got, a)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("anchors %q, want %q", got, tc.want)
			}
		})
	}
}

var (
	// metricRE is a Fleet metric name in an expression.
	metricRE = regexp.MustCompile(`\bfleet_[a-z_]+\b`)
	// matcherRE is a label matcher: name="…", name=~"…", name!="…".
	matcherRE = regexp.MustCompile(`\b([a-z_]+)\s*(?:=~|!~|!=|=)\s*"`)
	// groupingRE is a by, without, on or ignoring clause.
	groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	// templateLabelRE is a label an annotation prints.
	templateLabelRE = regexp.MustCompile(`\$labels\.([a-z_]+)`)
)

// registered are the label names of every Fleet family the operator and
// the auth callout register, by family name.
func registered(t *testing.T) map[string][]string {
	t.Helper()
	fams, err := metrics.Describe(slices.Concat(operator.NewMetrics().Collectors(),
		[]prometheus.Collector{events.NewSkipCounter().Collector()}, authcallout.NewMetrics().Collectors())...)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string][]string{}
	for _, f := range fams {
		labels[f.Name] = f.Labels
	}
	return labels
}

// unknownNames lists the metrics r uses that are not among families (a
// histogram's _bucket series counts as its family), and the labels it uses
// that none of its metrics has, besides the ones Prometheus adds (job,
// instance) and le.
func unknownNames(r alerts.Rule, families map[string][]string) []string {
	var out []string
	allowed := []string{"job", "instance", "le"}
	names := metricRE.FindAllString(r.Expr, -1)
	if len(names) == 0 {
		out = append(out, "no Fleet metric in "+r.Expr)
	}
	for _, n := range names {
		ls, ok := families[n]
		if !ok {
			ls, ok = families[strings.TrimSuffix(n, "_bucket")]
		}
		if !ok {
			out = append(out, "the metric "+n+", which no binary registers")
		}
		allowed = append(allowed, ls...)
	}
	var used []string
	for _, m := range matcherRE.FindAllStringSubmatch(r.Expr, -1) {
		used = append(used, m[1])
	}
	for _, m := range groupingRE.FindAllStringSubmatch(r.Expr, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				used = append(used, l)
			}
		}
	}
	for _, a := range r.Annotations {
		for _, m := range templateLabelRE.FindAllStringSubmatch(a, -1) {
			used = append(used, m[1])
		}
	}
	for _, l := range used {
		if !slices.Contains(allowed, l) {
			out = append(out, "the label "+l+", which none of "+strings.Join(names, ", ")+" has")
		}
	}
	return out
}

// TestTheRulesUseOnlyMetricsTheBinariesRegister keeps the expressions to
// the families the operator and the auth callout register and their labels.
func TestTheRulesUseOnlyMetricsTheBinariesRegister(t *testing.T) {
	families := registered(t)
	pr, err := alerts.Parse(alerts.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range pr.Alerts() {
		for _, u := range unknownNames(r, families) {
			t.Errorf("%s uses %s", r.Alert, u)
		}
	}
}

func TestTheMetricCheckFindsNamesNoBinaryRegisters(t *testing.T) {
	families := registered(t)
	for _, tc := range []struct {
		name, expr, annotation, want string // want: in the one finding; "" for none
	}{
		{"registered families and labels pass", `sum by (le) (rate(fleet_authcallout_authorization_duration_seconds_bucket{result="refused"}[5m])) > 0`, "{{ $labels.instance }}", ""},
		{"an invented metric is found", `fleet_devices_offline > 0`, "", "fleet_devices_offline"},
		{"a label the metric lacks in a matcher is found", `fleet_devices{state="Stale"} > 0`, "", "the label state"},
		{"a label the metric lacks in a grouping is found", `sum by (device) (fleet_devices) > 0`, "", "the label device"},
		{"a label the metric lacks in an annotation is found", `fleet_devices > 0`, "{{ $labels.namespace }}", "the label namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unknownNames(alerts.Rule{Alert: "FleetX", Expr: tc.expr, Annotations: map[string]string{"summary": tc.annotation}}, families)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Errorf("found %q, want nothing", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("found %q, want one with %q", got, tc.want)
			}
		})
	}
}

func TestThePromtoolVersionIsOneVersion(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		re         *regexp.Regexp
	}{
		{"tools/promtool/go.mod pins it", "../../tools/promtool/go.mod", regexp.MustCompile(`(?m)^require github\.com/prometheus/prometheus (v\S+)$`)},
		{"Taskfile.yml builds it", "../../Taskfile.yml", regexp.MustCompile(`(?m)^\s+PROMTOOL_VERSION: (v\S+)$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			m := tc.re.FindSubmatch(b)
			if m == nil || string(m[1]) != promtoolVersion {
				t.Errorf("%s: %q, want %s", tc.file, m, promtoolVersion)
			}
		})
	}
}

func TestPromtoolChecksTheRulesAndTheirUnitTestsPass(t *testing.T) {
	bin := promtool(t)
	dir := workDir(t, ruleFile(t), unitTestFile(t))
	if out, ok := run(t, bin, dir, "check", "rules", "--lint=all", "--lint-fatal", ruleFileName(t)); !ok || !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules failed:\n%s", out)
	}
	if out, ok := run(t, bin, dir, "test", "rules", unitTests); !ok || !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules failed:\n%s", out)
	}
}

// alertRule is an alert, complete but for what the caller puts in its
// expr, for and summary.
func alertRule(expr, forDuration, summary string) string {
	return `      - alert: FleetBroken
        expr: ` + expr + `
        for: ` + forDuration + `
        labels:
          severity: warning
        annotations:
          summary: "` + summary + `"
          description: d
          runbook_url: ` + alerts.RunbookBase + `fleetbroken
`
}

// group is a rule file of one group of rules.
func group(rules ...string) string {
	return "groups:\n  - name: broken\n    rules:\n" + strings.Join(rules, "")
}

// TestPromtoolRefusesBrokenRules proves the harness: promtool, run as the
// test above runs it, fails on rules that are wrong (and passes the same
// rule well formed).
func TestPromtoolRefusesBrokenRules(t *testing.T) {
	bin := promtool(t)
	for _, tc := range []struct {
		name, rules, want string // want: in promtool's output
		ok                bool   // promtool's exit 0
	}{
		{"a well-formed rule passes, so the failures below are the rules'", group(alertRule("fleet_devices > 0", "5m", "s")), "SUCCESS", true},
		{"an expression that does not parse is refused", group(alertRule("sum(rate(fleet_devices[5m])", "5m", "s")), "parse error", false},
		{"an unknown function is refused", group(alertRule("rates(fleet_devices[5m]) > 0", "5m", "s")), "rates", false},
		{"a for that is not a duration is refused", group(alertRule("fleet_devices > 0", "15 minutes", "s")), "in duration", false},
		{"a template that does not parse is refused", group(alertRule("fleet_devices > 0", "5m", "{{ $value | nosuchfunc }}")), "nosuchfunc", false},
		{"the same rule twice is refused", group(alertRule("fleet_devices > 0", "5m", "s"), alertRule("fleet_devices > 0", "5m", "s")), "duplicate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := workDir(t, []byte(tc.rules), nil)
			out, ok := run(t, bin, dir, "check", "rules", "--lint=all", "--lint-fatal", ruleFileName(t))
			if ok != tc.ok || !strings.Contains(out, tc.want) {
				t.Errorf("promtool check rules: exit 0 = %v, want %v with %q:\n%s", ok, tc.ok, tc.want, out)
			}
		})
	}
}

// TestPromtoolFailsUnitTestsThatDoNotHold proves the unit tests: promtool
// fails a unit test whose expectation is wrong, and every alert has a
// history that fires it and one that must not: with its expression made to
// fire always, or never, the unit tests fail on that alert.
func TestPromtoolFailsUnitTestsThatDoNotHold(t *testing.T) {
	bin := promtool(t)
	wrong := `rule_files: [` + ruleFileName(t) + `]
evaluation_interval: 1m
tests:
  - name: a quiet fleet whose Devices are said to be Stale
    interval: 1m
    input_series:
      - series: 'fleet_devices{liveness="Online"}'
        values: '100x30'
    alert_rule_test:
      - eval_time: 20m
        alertname: FleetDevicesStale
        exp_alerts:
          - exp_labels: {severity: warning}
`
	t.Run("an alert expected where the series do not fire it fails", func(t *testing.T) {
		out, ok := run(t, bin, workDir(t, ruleFile(t), []byte(wrong)), "test", "rules", unitTests)
		if ok || !strings.Contains(out, "alertname: FleetDevicesStale") {
			t.Errorf("promtool test rules: exit 0 = %v, want a failure on FleetDevicesStale:\n%s", ok, out)
		}
	})
	for _, alert := range wantAlerts {
		for _, m := range []struct{ how, expr string }{{"always", "vector(1)"}, {"never", "vector(0) > 1"}} {
			t.Run(alert+" made to fire "+m.how+" fails its unit tests", func(t *testing.T) {
				out, ok := run(t, bin, workDir(t, mutated(t, alert, m.expr), testsOf(t, alert)), "test", "rules", unitTests)
				if ok || !strings.Contains(out, "alertname: "+alert+",") {
					t.Errorf("promtool test rules: exit 0 = %v, want a failure on %s:\n%s", ok, alert, out)
				}
			})
		}
	}
}

// testsOf is the unit test file with only the tests that check alert (the
// others cost time and cannot fail on it).
func testsOf(t *testing.T, alert string) []byte {
	t.Helper()
	var f map[string]any
	if err := yaml.Unmarshal(unitTestFile(t), &f); err != nil {
		t.Fatal(err)
	}
	var kept []any
	for _, tc := range f["tests"].([]any) {
		for _, at := range tc.(map[string]any)["alert_rule_test"].([]any) {
			if at.(map[string]any)["alertname"] == alert {
				kept = append(kept, tc)
				break
			}
		}
	}
	if len(kept) == 0 {
		t.Fatalf("%s has no unit test in %s", alert, unitTests)
	}
	f["tests"] = kept
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mutated is the rule file with the expression of every rule of alert
// replaced by expr.
func mutated(t *testing.T, alert, expr string) []byte {
	t.Helper()
	var f map[string]any
	if err := yaml.Unmarshal(ruleFile(t), &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if rule := r.(map[string]any); rule["alert"] == alert {
				rule["expr"] = expr
				n++
			}
		}
	}
	if n == 0 {
		t.Fatalf("no rule of %s", alert)
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
