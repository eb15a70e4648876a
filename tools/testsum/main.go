// Command testsum reads `go test -json` on stdin, prints the human output of
// every test as it arrives, and ends with a summary. It exits non-zero when a
// test or package failed, when a package did not build, or when no test ran
// at all, so a CI run can never pass with zero tests.
//
// The summary repeats, under each failed test that has no failed subtest,
// the last lines that test printed (excerptLines of them, each cut at
// excerptWidth, after the first "panic:" line when there was one), and
// under each failed package what the package printed outside its tests (a
// timeout's panic, a TestMain's error) the same way: a CI page that shows
// only the end of a long log still says why.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// How much of a failed test's own output the summary repeats.
const (
	excerptLines = 8
	excerptWidth = 240
	// excerptTests is how many failed tests get an excerpt; the rest are
	// named only.
	excerptTests = 5
)

type summary struct {
	passed, failed, skipped int
	failedNames             []string
	skippedNames            []string
	failedPkgs              map[string]bool
	packages                map[string]bool
	// tails holds the last excerptLines lines each running test printed,
	// by package.test (a package's own output by package+pkgSuffix), and
	// panics the first "panic:" line of each; a passed or skipped test's
	// are dropped, a failed one's kept in excerpts.
	tails    map[string][]string
	panics   map[string]string
	excerpts map[string][]string
}

// pkgSuffix keys a package's own output (outside its tests) in tails.
const pkgSuffix = " (package)"

// excerpt moves name's kept lines to excerpts: the first panic line, when
// the tail no longer holds it, then the tail.
func (s *summary) excerpt(name string) {
	var out []string
	if p, ok := s.panics[name]; ok && !slices.Contains(s.tails[name], p) {
		out = append(out, p)
	}
	s.excerpts[name] = append(out, s.tails[name]...)
	s.drop(name)
}

// drop forgets name's kept lines.
func (s *summary) drop(name string) {
	delete(s.tails, name)
	delete(s.panics, name)
}

// keep remembers line as test name's latest output line.
func (s *summary) keep(name, line string) {
	switch t := strings.TrimSpace(line); {
	case t == "", t == "PASS", t == "FAIL", strings.HasPrefix(t, "FAIL\t"), strings.HasPrefix(t, "ok  \t"),
		strings.HasPrefix(t, "=== RUN"), strings.HasPrefix(t, "=== PAUSE"), strings.HasPrefix(t, "=== CONT"),
		strings.HasPrefix(t, "=== NAME"), strings.HasPrefix(t, "--- FAIL"), strings.HasPrefix(t, "--- PASS"), strings.HasPrefix(t, "--- SKIP"):
		return
	}
	line = strings.TrimRight(line, "\n")
	if r := []rune(line); len(r) > excerptWidth {
		line = string(r[:excerptWidth]) + "…"
	}
	if _, seen := s.panics[name]; !seen && strings.HasPrefix(strings.TrimSpace(line), "panic: ") {
		s.panics[name] = line
	}
	tail := append(s.tails[name], line)
	if len(tail) > excerptLines {
		tail = tail[len(tail)-excerptLines:]
	}
	s.tails[name] = tail
}

func main() {
	s, err := read(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	os.Exit(s.report(os.Stdout))
}

func read(r io.Reader, w io.Writer) (*summary, error) {
	s := &summary{failedPkgs: map[string]bool{}, packages: map[string]bool{}, tails: map[string][]string{}, panics: map[string]string{},
		excerpts: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil {
			// Build errors and other non-JSON lines are printed as they are.
			fmt.Fprintln(w, string(line))
			if len(strings.TrimSpace(string(line))) > 0 {
				s.failedPkgs["(build output)"] = true
			}
			continue
		}
		if ev.Output != "" {
			fmt.Fprint(w, ev.Output)
		}
		if ev.Package != "" {
			s.packages[ev.Package] = true
		}
		name := ev.Package + "." + ev.Test
		if ev.Test == "" {
			name = ev.Package + pkgSuffix
		}
		if ev.Output != "" {
			s.keep(name, ev.Output)
		}
		switch {
		case ev.Test != "" && ev.Action == "pass":
			s.passed++
			s.drop(name)
		case ev.Test != "" && ev.Action == "fail":
			s.failed++
			s.failedNames = append(s.failedNames, name)
			s.excerpt(name)
		case ev.Test != "" && ev.Action == "skip":
			s.skipped++
			s.skippedNames = append(s.skippedNames, name)
			s.drop(name)
		case ev.Test == "" && ev.Action == "fail":
			s.failedPkgs[ev.Package] = true
			s.excerpt(name)
		case ev.Test == "" && (ev.Action == "pass" || ev.Action == "skip"):
			s.drop(name)
		}
	}
	return s, sc.Err()
}

// hasFailedSubtest reports whether a subtest of the failed test name
// failed too: its excerpt says more than the parent's.
func (s *summary) hasFailedSubtest(name string) bool {
	for _, n := range s.failedNames {
		if strings.HasPrefix(n, name+"/") {
			return true
		}
	}
	return false
}

func (s *summary) report(w io.Writer) int {
	fmt.Fprintf(w, "\n=== testsum: %d passed, %d failed, %d skipped in %d packages\n",
		s.passed, s.failed, s.skipped, len(s.packages))
	for _, n := range s.skippedNames {
		fmt.Fprintln(w, "SKIPPED", n)
	}
	shown := 0
	for _, n := range s.failedNames {
		fmt.Fprintln(w, "FAILED ", n)
		if s.hasFailedSubtest(n) || shown == excerptTests {
			continue
		}
		shown++
		for _, l := range s.excerpts[n] {
			fmt.Fprintln(w, "        |", l)
		}
	}
	pkgs := make([]string, 0, len(s.failedPkgs))
	for p := range s.failedPkgs {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		fmt.Fprintln(w, "FAILED package", p)
		for _, l := range s.excerpts[p+pkgSuffix] {
			fmt.Fprintln(w, "        |", l)
		}
	}
	switch {
	case s.failed > 0 || len(pkgs) > 0:
		return 1
	case s.passed == 0:
		fmt.Fprintln(w, "testsum: no test ran; refusing to pass")
		return 1
	}
	return 0
}
