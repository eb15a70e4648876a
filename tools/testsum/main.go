// Command testsum reads `go test -json` on stdin, prints the human output of
// every test as it arrives, and ends with a summary. It exits non-zero when a
// test or package failed, when a package did not build, or when no test ran
// at all, so a CI run can never pass with zero tests.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
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

type summary struct {
	passed, failed, skipped int
	failedNames             []string
	skippedNames            []string
	failedPkgs              map[string]bool
	packages                map[string]bool
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
	s := &summary{failedPkgs: map[string]bool{}, packages: map[string]bool{}}
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
		switch {
		case ev.Test != "" && ev.Action == "pass":
			s.passed++
		case ev.Test != "" && ev.Action == "fail":
			s.failed++
			s.failedNames = append(s.failedNames, name)
		case ev.Test != "" && ev.Action == "skip":
			s.skipped++
			s.skippedNames = append(s.skippedNames, name)
		case ev.Test == "" && ev.Action == "fail":
			s.failedPkgs[ev.Package] = true
		}
	}
	return s, sc.Err()
}

func (s *summary) report(w io.Writer) int {
	fmt.Fprintf(w, "\n=== testsum: %d passed, %d failed, %d skipped in %d packages\n",
		s.passed, s.failed, s.skipped, len(s.packages))
	for _, n := range s.skippedNames {
		fmt.Fprintln(w, "SKIPPED", n)
	}
	for _, n := range s.failedNames {
		fmt.Fprintln(w, "FAILED ", n)
	}
	pkgs := make([]string, 0, len(s.failedPkgs))
	for p := range s.failedPkgs {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		fmt.Fprintln(w, "FAILED package", p)
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
