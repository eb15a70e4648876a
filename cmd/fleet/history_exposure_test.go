package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/history"
)

func TestFleetHistoryExposureListsTheDevicesAsTableAndJSON(t *testing.T) {
	url, _ := historyServer(t)
	creds := []string{"--server", url, "--user", historyUser, "--password", historyPassword}
	noEnv := func(string) string { return "" }
	var out, errOut bytes.Buffer
	if err := historyCmd(context.Background(), append([]string{"exposure", "--deployment", "lab/api"}, creds...), &out, &errOut, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, w := range []string{"Exposure: Deployment lab/api", "2 devices, 2 intervals (2 running)", "REVISIONS", "DEVICES",
		"sim-1   lab/api     1    canary", "sim-2   lab/api     1    target", "running"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	out.Reset()
	if err := historyCmd(context.Background(), append([]string{"exposure", "--score-digest", "sha256:web", "-o", "json"}, creds...), &out, &errOut, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var e history.Exposure
	if err := json.Unmarshal(out.Bytes(), &e); err != nil {
		t.Fatalf("output is not the answer's JSON: %v\n%s", err, out.String())
	}
	if e.Devices != 1 || len(e.Intervals) != 1 || e.Intervals[0].Device != "sim-2" || !e.Intervals[0].Failed {
		t.Errorf("web's exposure: %+v", e)
	}
	if strings.Contains(out.String()+errOut.String(), historyPassword) {
		t.Error("the password was printed")
	}
}

func TestFleetHistoryExposureRefusesBadInputNamingTheFix(t *testing.T) {
	noEnv := func(string) string { return "" }
	creds := []string{"--server", "nats://127.0.0.1:1", "--user", historyUser, "--password", historyPassword}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing to look for names the flags", append([]string{"exposure"}, creds...), "give --image"},
		{"an image with a space is refused", append([]string{"exposure", "--image", "api v1"}, creds...), "no spaces"},
		{"a positional argument names the flags", append([]string{"exposure", "api:v1"}, creds...), "--image, --score-digest or --deployment"},
		{"a bad --at names the format", append([]string{"exposure", "--image", "api:v1", "--at", "noon"}, creds...), "RFC 3339"},
		{"a Deployment without a namespace names the form", append([]string{"exposure", "--deployment", "api"}, creds...), "<namespace>/<name>"},
		{"an unreachable server names --server", append([]string{"exposure", "--image", "api:v1"}, creds...), "--server or NATS_URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := historyCmd(context.Background(), tc.args, &out, &errOut, noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one saying %q", err, tc.want)
			}
			if strings.Contains(err.Error()+errOut.String(), historyPassword) {
				t.Error("the password was printed")
			}
		})
	}
}
