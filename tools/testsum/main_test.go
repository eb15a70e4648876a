package main

import (
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
