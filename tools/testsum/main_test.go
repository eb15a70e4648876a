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

func TestTheSummaryRepeatsWhatAFailedTestPrintedLast(t *testing.T) {
	var in strings.Builder
	line := func(test, action, output string) {
		ev, _ := json.Marshal(event{Action: action, Package: "p", Test: test, Output: output})
		in.Write(append(ev, '\n'))
	}
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
	s, err := read(strings.NewReader(in.String()), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if got := s.report(&out); got != 1 {
		t.Errorf("exit code = %d, want 1", got)
	}
	summary := out.String()
	for _, want := range []string{"FAILED  p.TestBad\n", "| " + "    bad_test.go:5: step 5\n", "| " + "    bad_test.go:99: " + strings.Repeat("x", excerptWidth-len("    bad_test.go:99: ")) + "…\n",
		"FAILED  p.TestParent/child\n        |     parent_test.go:7: the child's reason\n", "FAILED  p.TestParent\n"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	for _, unwanted := range []string{"step 4", "a passing test's log", "the parent's setup", "=== RUN", "--- FAIL"} {
		if strings.Contains(summary, unwanted) {
			t.Errorf("the summary holds %q:\n%s", unwanted, summary)
		}
	}
}

func TestTheSummaryKeepsAPanicsFirstLineAndWhatAFailedPackagePrintedOutsideItsTests(t *testing.T) {
	var in strings.Builder
	line := func(pkg, test, action, output string) {
		ev, _ := json.Marshal(event{Action: action, Package: pkg, Test: test, Output: output})
		in.Write(append(ev, '\n'))
	}
	line("p", "TestPanics", "output", "panic: runtime error: index out of range [3] with length 3\n")
	for i := range 20 {
		line("p", "TestPanics", "output", fmt.Sprintf("\tsomewhere.go:%d +0x1f\n", i))
	}
	line("p", "TestPanics", "fail", "")
	line("p", "", "output", "FAIL\tp\t0.1s\n")
	line("p", "", "fail", "")
	line("q", "TestSlow", "output", "=== RUN   TestSlow\n")
	line("q", "", "output", "panic: test timed out after 30m0s\n")
	line("q", "", "output", "\trunning tests:\n")
	line("q", "", "output", "\t\tTestSlow (30m0s)\n")
	line("q", "", "output", "FAIL\tq\t1800.1s\n")
	line("q", "", "fail", "")
	line("r", "TestFine", "pass", "")
	line("r", "", "output", "ok  \tr\t0.1s\n")
	line("r", "", "pass", "")
	s, err := read(strings.NewReader(in.String()), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	s.report(&out)
	summary := out.String()
	for _, want := range []string{
		"FAILED  p.TestPanics\n        | panic: runtime error: index out of range [3] with length 3\n        | \tsomewhere.go:12 +0x1f\n",
		"FAILED package q\n        | panic: test timed out after 30m0s\n        | \trunning tests:\n        | \t\tTestSlow (30m0s)\n",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q:\n%s", want, summary)
		}
	}
	for _, unwanted := range []string{"somewhere.go:11 ", "FAIL\tq", "ok  \tr"} {
		if strings.Contains(summary, unwanted) {
			t.Errorf("the summary holds %q:\n%s", unwanted, summary)
		}
	}
}
