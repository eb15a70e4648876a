package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestMain lets the test binary be its own child process, as fleet-scale
// is: "<test binary> child <mode> ...".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "child" {
		if err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
			os.Stderr.WriteString("fleet-scale child: " + err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The command's own path: its flags, its wiring and the bench package's
// entry point as the command calls it, with a context that has no deadline
// (as the command's signal context has none).
func TestTheCommandRunsItsDocumentedInvocationsWithoutAContextDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("enrolls and runs simulated devices")
	}
	tests := []struct {
		name    string
		args    []string
		want    []string // lines of the printed figures
		wantErr string
	}{
		{
			name: "a small run with one flooding device, as docs/performance.md documents with -n 1000 -flooders 1",
			// No key cache: the provider generates the 11 keys (the cache
			// fills whole files of 1,000 keys).
			args: []string{"-key-cache", "", "-n", "10", "-flooders", "1", "-per-process", "12", "-timeout", "2m"},
			want: []string{"N=10 devices (1 agent process(es), the embedded server)", "flood       1 flooding device(s)", "goal        N=10 JetStream consumer count does not grow"},
		},
		{
			name:    "a size that is not a number is refused naming the flag",
			args:    []string{"-n", "1000,ten"},
			wantErr: `-n "1000,ten": want comma-separated device counts such as 1000,10000`,
		},
		{
			name:    "keys without a key cache is refused naming the flag",
			args:    []string{"-key-cache", "", "-n", "3", "keys"},
			wantErr: "keys: -key-cache is empty: name the folder to fill",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			args := append([]string{"-data-dir", t.TempDir()}, tt.args...)
			err := run(context.Background(), args, strings.NewReader(""), &out, &errs)
			t.Log("\n" + out.String())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("fleet-scale %s: error %v, want %q", strings.Join(args, " "), err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("fleet-scale %s: %v\n%s", strings.Join(args, " "), err, errs.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the output lacks %q", w)
				}
			}
		})
	}
}
