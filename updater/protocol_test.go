package updater_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/updater"
)

const (
	uid    = "0b5c8a4e-6f1d-4c2b-9a57-3e1f2d4c5b6a"
	sum    = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	goodUp = `{"v":1,"id":"` + uid + `","op":"agent-upgrade","agent":{"url":"https://example.com/fleet-agent","sha256":"` + sum + `","version":"1.2.3"}}`
)

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    updater.Request
		wantErr bool
	}{
		{"a system-upgrade with a uid decodes", `{"v":1,"id":"` + uid + `","op":"system-upgrade"}`,
			updater.Request{V: 1, ID: uid, Op: updater.OpSystemUpgrade}, false},
		{"an agent-upgrade with its artifact decodes", goodUp,
			updater.Request{V: 1, ID: uid, Op: updater.OpAgentUpgrade, Agent: &events.AgentArtifact{URL: "https://example.com/fleet-agent", SHA256: sum, Version: "1.2.3"}}, false},
		{"a status request decodes", `{"v":1,"id":"abc","op":"status"}`, updater.Request{V: 1, ID: "abc", Op: updater.OpStatus}, false},
		{"a hello with a version decodes", `{"v":1,"op":"hello","version":"v2.0.1+git.abc"}`, updater.Request{V: 1, Op: updater.OpHello, Version: "v2.0.1+git.abc"}, false},
		{"an unknown op is refused", `{"v":1,"id":"abc","op":"exec"}`, updater.Request{}, true},
		{"an extra field (a command) is refused", `{"v":1,"id":"abc","op":"system-upgrade","command":"rm -rf /"}`, updater.Request{}, true},
		{"an extra field in the artifact (a path) is refused", strings.Replace(goodUp, `"version":"1.2.3"`, `"version":"1.2.3","path":"/etc/passwd"`, 1), updater.Request{}, true},
		{"another protocol version is refused", `{"v":2,"id":"abc","op":"status"}`, updater.Request{}, true},
		{"an id that is a path is refused", `{"v":1,"id":"../../etc/passwd","op":"system-upgrade"}`, updater.Request{}, true},
		{"an empty id is refused", `{"v":1,"op":"system-upgrade"}`, updater.Request{}, true},
		{"a file URL is refused", strings.Replace(goodUp, "https://example.com", "file://", 1), updater.Request{}, true},
		{"a URL with user info is refused", strings.Replace(goodUp, "https://example.com", "https://u:p@example.com", 1), updater.Request{}, true},
		{"an uppercase sha256 is refused", strings.Replace(goodUp, sum, strings.ToUpper(sum), 1), updater.Request{}, true},
		{"a version with a slash is refused", strings.Replace(goodUp, `"1.2.3"`, `"../1"`, 1), updater.Request{}, true},
		{"an agent-upgrade without its artifact is refused", `{"v":1,"id":"abc","op":"agent-upgrade"}`, updater.Request{}, true},
		{"an artifact on a system-upgrade is refused", strings.Replace(goodUp, "agent-upgrade", "system-upgrade", 1), updater.Request{}, true},
		{"a hello with an id is refused", `{"v":1,"id":"abc","op":"hello","version":"1"}`, updater.Request{}, true},
		{"a second object after the request is refused", `{"v":1,"id":"abc","op":"status"}{"v":1}`, updater.Request{}, true},
		{"an array is refused", `[1,2]`, updater.Request{}, true},
		{"a request over the size limit is refused", `{"v":1,"id":"abc","op":"status","x":"` + strings.Repeat("a", updater.MaxRequestSize) + `"}`, updater.Request{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := updater.DecodeRequest(strings.NewReader(tc.in))
			if tc.wantErr {
				if !errors.Is(err, updater.ErrInvalidRequest) {
					t.Fatalf("err = %v, want ErrInvalidRequest", err)
				}
				if len(tc.in) > 20 && strings.Contains(err.Error(), tc.in[len(tc.in)-20:]) {
					t.Errorf("the error quotes the input: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("request (-want +got):\n%s", d)
			}
		})
	}
}

// FuzzDecodeRequest checks that whatever decodes is a valid request whose
// id and version are file-name safe, and that it encodes back to the same
// request.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{goodUp, `{"v":1,"id":"abc","op":"status"}`, `{"v":1,"op":"hello","version":"1"}`,
		`{"v":1,"id":"a","op":"system-upgrade"}`, `{"v":1,"id":"a","op":"system-upgrade","x":1}`, `{}`, `[`, "\x00",
		`{"v":1,"id":"a","op":"status","op":"system-upgrade"}`, `{"v":1,"id":"a","OP":"status"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		req, err := updater.DecodeRequest(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, updater.ErrInvalidRequest) {
				t.Fatalf("error not ErrInvalidRequest: %v", err)
			}
			return
		}
		if len(in) > updater.MaxRequestSize {
			t.Fatalf("a request of %d bytes decoded", len(in))
		}
		if err := req.Validate(); err != nil {
			t.Fatalf("decoded but invalid: %v", err)
		}
		for _, s := range []string{req.ID, req.Version} {
			if strings.ContainsAny(s, "/\\\x00") || strings.Contains(s, "..") {
				t.Fatalf("unsafe name %q decoded", s)
			}
		}
		if req.Agent != nil && (strings.Contains(req.Agent.Version, "/") || !strings.HasPrefix(req.Agent.URL, "http")) {
			t.Fatalf("unsafe artifact %+v decoded", req.Agent)
		}
		b, _ := json.Marshal(req)
		again, err := updater.DecodeRequest(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("re-encoded request does not decode: %v", err)
		}
		if d := cmp.Diff(req, again); d != "" {
			t.Fatalf("round trip (-first +second):\n%s", d)
		}
	})
}

// TestDecodeRequestRefusesDuplicateAndMiscasedKeys: encoding/json alone
// lets the last of two equal keys win and matches keys in any case; the
// decoder refuses both, naming the field.
func TestDecodeRequestRefusesDuplicateAndMiscasedKeys(t *testing.T) {
	agent := `"agent":{"url":"https://example.com/fleet-agent","sha256":"` + sum + `","version":"1.2.3"}`
	tests := []struct {
		name    string
		in      string
		wantMsg string
	}{
		{"a second op is refused (the last one used to win)", `{"v":1,"id":"abc","op":"status","op":"system-upgrade"}`,
			`duplicate key "op"`},
		{"a second op spelled with an escape is refused", `{"v":1,"id":"abc","op":"status","\u006fp":"system-upgrade"}`,
			`duplicate key "op"`},
		{"a second id is refused", `{"v":1,"id":"abc","op":"status","id":"def"}`, `duplicate key "id"`},
		{"a second agent is refused", `{"v":1,"id":"abc","op":"agent-upgrade",` + agent + `,` + agent + `}`, `duplicate key "agent"`},
		{"a second url in the agent is refused", strings.Replace(goodUp, `"url":`, `"url":"https://example.com/x","url":`, 1),
			`duplicate key "agent.url"`},
		{"a second sha256 in the agent is refused", strings.Replace(goodUp, `"version":"1.2.3"`, `"version":"1.2.3","sha256":"`+sum+`"`, 1),
			`duplicate key "agent.sha256"`},
		{"an op in upper case is refused", `{"v":1,"id":"abc","OP":"system-upgrade"}`, `key "op" must be written exactly so`},
		{"an op in upper case after the real one is refused", `{"v":1,"id":"abc","op":"status","Op":"system-upgrade"}`,
			`key "op" must be written exactly so`},
		{"a v in upper case is refused", `{"V":1,"id":"abc","op":"status"}`, `key "v" must be written exactly so`},
		{"a key that folds to sha256 (a long s) is refused", strings.Replace(goodUp, `"sha256":`, `"\u017fha256":`, 1),
			`key "agent.sha256" must be written exactly so`},
		{"a url in upper case in the agent is refused", strings.Replace(goodUp, `"url":`, `"URL":`, 1),
			`key "agent.url" must be written exactly so`},
		{"an agent in upper case is refused", strings.Replace(goodUp, `"agent":`, `"Agent":`, 1), `key "agent" must be written exactly so`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := updater.DecodeRequest(strings.NewReader(tc.in))
			if !errors.Is(err, updater.ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("err = %q, want it to say %q", err, tc.wantMsg)
			}
		})
	}
}
