package docs

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/metrics"
	"github.com/nationtech/harmony-fleet/operator"
)

// catalogueRow is one metric of docs/metrics.md.
type catalogueRow struct {
	binary, name, typ string
	labels            []string
}

var (
	// sectionRE is a binary's heading: "## fleet-operator".
	sectionRE = regexp.MustCompile(`^## (fleet-[a-z]+)\s*$`)
	// rowRE is a catalogue row: | `name` | type | `l1`, `l2` or — | answer |
	rowRE   = regexp.MustCompile("^\\| `(fleet_[a-z_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\| [^|]+ \\|$")
	labelRE = regexp.MustCompile("`([a-z_]+)`")
)

// catalogue reads the metric tables of docs/metrics.md by binary.
func catalogue(t *testing.T) map[string][]catalogueRow {
	t.Helper()
	b, err := os.ReadFile("metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]catalogueRow{}
	binary := ""
	for line := range strings.Lines(string(b)) {
		line = strings.TrimRight(line, "\n")
		if m := sectionRE.FindStringSubmatch(line); m != nil {
			binary = m[1]
			continue
		}
		if strings.HasPrefix(line, "## ") {
			binary = ""
			continue
		}
		m := rowRE.FindStringSubmatch(line)
		if m == nil || binary == "" {
			if binary != "" && strings.HasPrefix(line, "| `fleet_") {
				t.Errorf("docs/metrics.md: a row that does not read as | `name` | counter|gauge|histogram | `labels` or — | what it answers |: %s", line)
			}
			continue
		}
		r := catalogueRow{binary: binary, name: m[1], typ: m[2]}
		for _, l := range labelRE.FindAllStringSubmatch(m[3], -1) {
			r.labels = append(r.labels, l[1])
		}
		slices.Sort(r.labels)
		out[binary] = append(out[binary], r)
	}
	return out
}

// TestTheMetricCatalogueIsWhatTheBinariesRegister keeps docs/metrics.md
// equal to the Fleet families each binary registers: the same names and
// label names, nothing missing, nothing extra.
func TestTheMetricCatalogueIsWhatTheBinariesRegister(t *testing.T) {
	cat := catalogue(t)
	for _, tc := range []struct {
		binary     string
		collectors []prometheus.Collector
	}{
		{"fleet-operator", append(operator.NewMetrics().Collectors(), events.NewSkipCounter().Collector())},
		{"fleet-authcallout", authcallout.NewMetrics().Collectors()},
		{"fleet-agent", agent.NewMetrics(nil).Collectors()},
		{"fleet-dashboard", devicelogs.NewMetrics().Collectors()},
	} {
		t.Run(tc.binary+" registers exactly what the catalogue lists", func(t *testing.T) {
			fams, err := metrics.Describe(tc.collectors...)
			if err != nil {
				t.Fatal(err)
			}
			documented := map[string]catalogueRow{}
			for _, r := range cat[tc.binary] {
				documented[r.name] = r
			}
			if len(documented) == 0 {
				t.Fatalf("docs/metrics.md has no table under ## %s", tc.binary)
			}
			registered := map[string]bool{}
			for _, f := range fams {
				registered[f.Name] = true
				r, ok := documented[f.Name]
				switch {
				case !ok:
					t.Errorf("%s registers %s (labels %v), which docs/metrics.md does not list under ## %s", tc.binary, f.Name, f.Labels, tc.binary)
				case !slices.Equal(r.labels, f.Labels):
					t.Errorf("%s: docs/metrics.md gives labels %v, the binary registers %v", f.Name, r.labels, f.Labels)
				}
				if f.Help == "" {
					t.Errorf("%s has no help text", f.Name)
				}
			}
			for name := range documented {
				if !registered[name] {
					t.Errorf("docs/metrics.md lists %s under ## %s, which the binary does not register", name, tc.binary)
				}
			}
		})
	}
}

// TestTheCatalogueReaderRefusesWhatItCannotRead shows the catalogue test
// can fail: a row it cannot read is an error, not a silently missing metric.
func TestTheCatalogueReaderRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name, row string
		reads     bool
	}{
		{"a well-formed row reads", "| `fleet_x_total` | counter | `a`, `b` | what it answers |", true},
		{"a row without labels reads with a dash", "| `fleet_x` | gauge | — | what it answers |", true},
		{"an unknown type does not", "| `fleet_x` | summary | — | what it answers |", false},
		{"a row without an answer does not", "| `fleet_x` | gauge | — |", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := rowRE.MatchString(tc.row); got != tc.reads {
				t.Errorf("reads %q = %v, want %v", tc.row, got, tc.reads)
			}
		})
	}
}
