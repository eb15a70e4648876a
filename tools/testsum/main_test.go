package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  int
	}{
		{"a run with a passing test passes", `{"Action":"pass","Package":"p","Test":"T"}`, 0},
		{"a run where no test ran fails", `{"Action":"pass","Package":"p"}`, 1},
		{"a failing test fails the run", `{"Action":"pass","Package":"p","Test":"A"}
{"Action":"fail","Package":"p","Test":"B"}`, 1},
		{"a package that failed without a test failing fails the run", `{"Action":"pass","Package":"p","Test":"A"}
{"Action":"fail","Package":"q"}`, 1},
		{"a build error printed as plain text fails the run", `{"Action":"pass","Package":"p","Test":"A"}
# q
q.go:1: syntax error`, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := read(strings.NewReader(tc.input), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.report(io.Discard); got != tc.want {
				t.Errorf("exit code = %d, want %d", got, tc.want)
			}
		})
	}
}

// stream builds a `go test -json` stream.
type stream struct{ strings.Builder }

func (s *stream) line(pkg, test, action, output string) {
	ev, _ := json.Marshal(event{Action: action, Package: pkg, Test: test, Output: output})
	s.Write(append(ev, '\n'))
}

// summarise reads the stream and returns the summary and its exit code.
func (s *stream) summarise(t *testing.T) (string, int) {
	t.Helper()
	sum, err := read(strings.NewReader(s.String()), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	code := sum.report(&out)
	return out.String(), code
}

// checkSummary fails t when summary lacks a wanted text or holds an
// unwanted one.
func checkSummary(t *testing.T, summary string, want, unwanted []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(summary, w) {
			t.Errorf("the summary lacks %q:\n%s", w, summary)
		}
	}
	for _, u := range unwanted {
		if strings.Contains(summary, u) {
			t.Errorf("the summary holds %q:\n%s", u, summary)
		}
	}
}

func TestTheSummaryRepeatsWhatAFailedTestPrintedLast(t *testing.T) {
	var in stream
	line := func(test, action, output string) { in.line("p", test, action, output) }
	line("TestOK", "run", "")
	line("TestOK", "output", "    ok_test.go:1: a passing test's log\n")
	line("TestOK", "pass", "")
	line("TestBad", "run", "")
	line("TestBad", "output", "=== RUN   TestBad\n")
	for i := range 12 {
		line("TestBad", "output", fmt.Sprintf("    bad_test.go:%d: step %d\n", i, i))
	}
	line("TestBad", "output", "    bad_test.go:99: "+strings.Repeat("x", 500)+"\n")
	line("TestBad", "output", "--- FAIL: TestBad (1.00s)\n")
	line("TestBad", "fail", "")
	line("TestParent/child", "output", "    parent_test.go:7: the child's reason\n")
	line("TestParent/child", "fail", "")
	line("TestParent", "output", "    parent_test.go:3: the parent's setup\n")
	line("TestParent", "fail", "")
	summary, code := in.summarise(t)
	if code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	checkSummary(t, summary, []string{"FAILED  p.TestBad\n", "| " + "    bad_test.go:5: step 5\n",
		"| " + "    bad_test.go:99: " + strings.Repeat("x", excerptWidth-len("    bad_test.go:99: ")) + "…\n",
		"FAILED  p.TestParent/child\n        |     parent_test.go:7: the child's reason\n", "FAILED  p.TestParent\n"},
		[]string{"step 4", "a passing test's log", "the parent's setup", "=== RUN", "--- FAIL"})
}

func TestTheSummaryKeepsAPanicsFirstLineAndWhatAFailedPackagePrintedOutsideItsTests(t *testing.T) {
	var in stream
	in.line("p", "TestPanics", "output", "panic: runtime error: index out of range [3] with length 3\n")
	for i := range 20 {
		in.line("p", "TestPanics", "output", fmt.Sprintf("\tsomewhere.go:%d +0x1f\n", i))
	}
	in.line("p", "TestPanics", "fail", "")
	in.line("p", "", "output", "FAIL\tp\t0.1s\n")
	in.line("p", "", "fail", "")
	in.line("q", "TestSlow", "output", "=== RUN   TestSlow\n")
	in.line("q", "", "output", "panic: test timed out after 30m0s\n")
	in.line("q", "", "output", "\trunning tests:\n")
	in.line("q", "", "output", "\t\tTestSlow (30m0s)\n")
	in.line("q", "", "output", "FAIL\tq\t1800.1s\n")
	in.line("q", "", "fail", "")
	in.line("r", "TestFine", "pass", "")
	in.line("r", "", "output", "ok  \tr\t0.1s\n")
	in.line("r", "", "pass", "")
	summary, _ := in.summarise(t)
	checkSummary(t, summary, []string{
		"FAILED  p.TestPanics\n        | panic: runtime error: index out of range [3] with length 3\n        | \tsomewhere.go:12 +0x1f\n",
		"FAILED package q\n        | panic: test timed out after 30m0s\n        | \trunning tests:\n        | \t\tTestSlow (30m0s)\n",
	}, []string{"somewhere.go:11 ", "FAIL\tq", "ok  \tr"})
}
