package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// flagDefs maps a flag.FlagSet (or flag package) method that defines a flag
// to its number of arguments and the index of the flag's name among them.
var flagDefs = map[string]struct{ args, name int }{
	"String": {3, 0}, "Bool": {3, 0}, "Int": {3, 0}, "Int64": {3, 0}, "Uint": {3, 0}, "Uint64": {3, 0},
	"Float64": {3, 0}, "Duration": {3, 0}, "Func": {3, 0}, "BoolFunc": {3, 0},
	"StringVar": {4, 1}, "BoolVar": {4, 1}, "IntVar": {4, 1}, "Int64Var": {4, 1}, "UintVar": {4, 1},
	"Uint64Var": {4, 1}, "Float64Var": {4, 1}, "DurationVar": {4, 1}, "TextVar": {4, 1}, "Var": {3, 1},
}

// definedFlags returns the names of the flags the Go source defines: every
// call of a flag-defining method (fs.String("name", …), fs.StringVar(&v,
// "name", …), …) whose name is a string literal, sorted. It reads only
// source, so a test needs no build of the binary.
func definedFlags(t *testing.T, files map[string]string) []string {
	t.Helper()
	var names []string
	fset := token.NewFileSet()
	for name, src := range files {
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			def, ok := flagDefs[sel.Sel.Name]
			if !ok || len(call.Args) != def.args {
				return true
			}
			if lit, ok := call.Args[def.name].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil && s != "" {
					names = append(names, s)
				}
			}
			return true
		})
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// packageSources reads the non-test Go files of dir.
func packageSources(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[p] = string(b)
	}
	return files
}

// documents reports whether doc names the flag as `-name` or `--name`: in
// code (after a backtick, or after a space as in `fleet-updater client --op
// status`), and not as a prefix of a longer flag.
func documents(doc, flag string) bool {
	return regexp.MustCompile("[` (\\[]--?" + regexp.QuoteMeta(flag) + "([^a-z0-9-]|$)").MatchString(doc)
}

// requiredRow matches a flag table row: | `--name` | … | whose cells call
// the flag required.
var requiredRow = regexp.MustCompile("(?m)^\\| `--?([a-z0-9-]+)`[^\n]*\\brequired\\b")

// TestEveryFlagIsDocumented keeps each binary's user guide complete: every
// flag the binary defines is named in it (as `--name` or `-name`), and a
// flag the guide's flag table calls required is one the binary refuses to
// run without: its source has a message naming the flag with "required",
// "needs" or "is empty".
func TestEveryFlagIsDocumented(t *testing.T) {
	tests := []struct {
		dir  string
		docs []string
		min  int               // flags the source must yield, so the check checks something
		skip map[string]string // flag → why it is not checked yet
	}{
		{"../cmd/fleet-authcallout", []string{"security.md"}, 18, nil},
		{"../cmd/fleet-operator", []string{"operator.md"}, 40, nil},
		{"../cmd/fleet-agent", []string{"agent.md"}, 20, nil},
		{"../cmd/fleet-updater", []string{"updater.md"}, 20, nil},
		// fleet enroll's flags are documented with the identity provider
		// they talk to (zitadel.md) and in security.md.
		{"../cmd/fleet", []string{"fleet.md", "history.md", "security.md", "zitadel.md"}, 30, nil},
	}
	for _, tc := range tests {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			src := packageSources(t, tc.dir)
			flags := definedFlags(t, src)
			if len(flags) < tc.min {
				t.Fatalf("found %d flags in %s, want at least %d: did the way flags are defined change? %v", len(flags), tc.dir, tc.min, flags)
			}
			var doc strings.Builder
			for _, d := range tc.docs {
				b, err := os.ReadFile(d)
				if err != nil {
					t.Fatal(err)
				}
				doc.Write(b)
			}
			for _, f := range flags {
				if _, ok := tc.skip[f]; !ok && !documents(doc.String(), f) {
					t.Errorf("%s defines -%s, which %s does not name (as `--%s` or `-%s`)", tc.dir, f, strings.Join(tc.docs, " or "), f, f)
				}
			}
			var messages []string
			for _, s := range src {
				messages = append(messages, s)
			}
			all := strings.Join(messages, "\n")
			for _, m := range requiredRow.FindAllStringSubmatch(doc.String(), -1) {
				if !slices.Contains(flags, m[1]) {
					continue // another binary's flag table in the same guide
				}
				if !refusesWithout(all, m[1]) {
					t.Errorf("%s calls -%s required, but %s has no message naming it with \"required\", \"needs\" or \"is empty\": is it optional?", strings.Join(tc.docs, " or "), m[1], tc.dir)
				}
			}
		})
	}
}

// refusesWithout reports whether src has a string literal naming flag with
// "required", "needs" or "is empty" (the error of a command run without
// it).
func refusesWithout(src, flag string) bool {
	named := regexp.MustCompile("(^|[^a-z0-9-])--?" + regexp.QuoteMeta(flag) + "([^a-z0-9-]|$)")
	for _, lit := range regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).FindAllString(src, -1) {
		if named.MatchString(lit) && (strings.Contains(lit, "required") || strings.Contains(lit, "needs") || strings.Contains(lit, "is empty")) {
			return true
		}
	}
	return false
}

func TestTheFlagCheckFindsFlagsAndMissingOnes(t *testing.T) {
	flags := definedFlags(t, map[string]string{"main.go": `package main
import "flag"
func run() {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var v string
	_ = fs.String("nats-url", "", "server")
	fs.StringVar(&v, "key-file", "", "key")
	fs.Var(nil, "label", "labels")
	_ = flag.Duration("timeout", 0, "how long")
	_ = fs.Lookup("not-a-definition")
	if v == "" { panic("--key-file is required") }
}`})
	if want := []string{"key-file", "label", "nats-url", "timeout"}; !slices.Equal(flags, want) {
		t.Fatalf("flags %v, want %v", flags, want)
	}
	doc := "| `--nats-url` | none | … |\n`-key-file path`\n"
	if !documents(doc, "nats-url") || !documents(doc, "key-file") || documents(doc, "label") || documents(doc, "nats") {
		t.Errorf("documents: a flag named in backticks counts, a flag not named or a prefix of one does not")
	}
	src := `errors.New("--key-file is required")` + "\n" + `errors.New("--batch must be 1 or more")`
	if !refusesWithout(src, "key-file") || refusesWithout(src, "batch") {
		t.Errorf("refusesWithout: a message naming the flag with required counts, one without does not")
	}
	if m := requiredRow.FindAllStringSubmatch("| `--batch` | none | approve only, required: the batch |\n| `--timeout` | `30s` | optional |\n", -1); len(m) != 1 || m[0][1] != "batch" {
		t.Errorf("requiredRow: %v, want the --batch row only", m)
	}
}

// TestEveryCalloutFieldIsInTheConfigurationTable keeps security.md's
// fleet-authcallout table true: a row for every field of the JSON file
// (authcallout.Config), whose flag cell is the field's flag when the binary
// defines one (the field's name with dashes) and "—" when it does not.
func TestEveryCalloutFieldIsInTheConfigurationTable(t *testing.T) {
	b, err := os.ReadFile("security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "### fleet-authcallout configuration")
	if !ok {
		t.Fatal("security.md has no section ### fleet-authcallout configuration")
	}
	section, _, _ = strings.Cut(section, "\n#")
	rows := map[string]string{} // field → flag cell
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| ([^|]+) \\|").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = strings.TrimSpace(m[2])
	}
	flags := definedFlags(t, packageSources(t, "../cmd/fleet-authcallout"))
	typ := reflect.TypeFor[authcallout.Config]()
	for i := range typ.NumField() {
		field, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		cell, ok := rows[field]
		if !ok {
			t.Errorf("security.md's fleet-authcallout table has no row for the field %q", field)
			continue
		}
		want := "—"
		if flag := strings.ReplaceAll(field, "_", "-"); slices.Contains(flags, flag) {
			want = "`-" + flag + "`"
		}
		if cell != want {
			t.Errorf("security.md's fleet-authcallout table gives %q the flag %s, want %s", field, cell, want)
		}
		delete(rows, field)
	}
	for field := range rows {
		t.Errorf("security.md's fleet-authcallout table has a row for %q, which is not a field of the configuration", field)
	}
}
