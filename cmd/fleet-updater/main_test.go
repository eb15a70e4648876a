package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunRefusesBadFlagsNamingTheFix(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown allowed user names the flag and the fix", []string{"--allowed-user", "no-such-user-fleet"}, "--allowed-user"},
		{"an unknown socket group names the flag and the fix", []string{"--allowed-user", "0", "--socket-group", "no-such-group-fleet"}, "--socket-group"},
		{"an empty restart command is refused", []string{"--allowed-user", "0", "--socket-group", "", "--restart-command", " "}, "--restart-command is empty"},
		{"a relative socket path is refused", []string{"--allowed-user", "0", "--socket-group", "", "--socket", "updater.sock"}, "must be an absolute path"},
		{"arguments after the flags are refused", []string{"--allowed-user", "0", "rm"}, "unexpected arguments"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestTheClientRefusesAnInvalidRequestBeforeSendingIt(t *testing.T) {
	var out bytes.Buffer
	err := client(context.Background(), []string{"--socket", "/nonexistent/updater.sock", "--op", "exec", "--id", "a"}, &out)
	if err == nil || !strings.Contains(err.Error(), "op must be") {
		t.Fatalf("err = %v, want the op refused", err)
	}
}
