package main

import (
	"os"
	"path"
	"strings"
	"testing"
)

// unitDir holds the systemd units.
const unitDir = "../../deploy/systemd"

// service returns the [Service] settings of a unit file (the last
// assignment of each key).
func service(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	section := ""
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
		case section == "[Service]":
			if k, v, ok := strings.Cut(l, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

// words splits a command line as systemd does for ExecStart (double
// quotes group words).
func words(s string) []string {
	var out []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

func TestTheUnitRunsTheUpdaterWhereSystemdMakesItsFolders(t *testing.T) {
	s := service(t, unitDir+"/fleet-updater.service")
	agent := service(t, unitDir+"/fleet-agent.service")
	argv := words(s["ExecStart"])
	if len(argv) == 0 || argv[0] != "/usr/local/bin/fleet-updater" {
		t.Fatalf("ExecStart %q does not run /usr/local/bin/fleet-updater", s["ExecStart"])
	}
	f, err := parse(argv[1:])
	if err != nil {
		t.Fatalf("the unit's flags do not parse: %v", err)
	}
	agentArgv := words(agent["ExecStart"])
	tests := []struct {
		name      string
		got, want string
	}{
		{"the socket is in the RuntimeDirectory", path.Dir(f.socket), "/run/" + s["RuntimeDirectory"]},
		{"the task records are in the StateDirectory", f.stateDir, "/var/lib/" + s["StateDirectory"]},
		{"the state folder is root's alone", s["StateDirectoryMode"], "0700"},
		{"the updater runs as root", s["User"], ""},
		{"the allowed user is the agent unit's user", f.allowed, agent["User"]},
		{"the socket's group is the agent unit's group", f.group, agent["Group"]},
		{"the link the updater switches is what the agent unit runs", f.link, agentArgv[0]},
		{"the restart command restarts the agent's unit", f.restart, "systemctl restart fleet-agent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
