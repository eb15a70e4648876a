package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/agent"
)

func TestParsePullCredential(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr []string // substrings; nil: valid
	}{
		{"all three string fields make a credential", `{"registry":"hub.nationtech.io:5000","username":"u","password":"s3cret"}`, nil},
		{"a missing password is named", `{"registry":"r","username":"u"}`, []string{`"password" is missing`}},
		{"a missing registry and username are both named", `{"password":"s3cret"}`, []string{`"registry" is missing`, `"username" is missing`}},
		{"a number where a string belongs is named", `{"registry":"r","username":5,"password":"s3cret"}`, []string{`"username" must be a string`}},
		{"an empty field is named", `{"registry":"","username":"u","password":"s3cret"}`, []string{`"registry" is empty`}},
		{"text that is not JSON is refused", `registry=r`, []string{"not a JSON object"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := agent.ParsePullCredential([]byte(tc.raw))
			if tc.wantErr == nil {
				if err != nil || c.Password != "s3cret" {
					t.Fatalf("got %v, %v", c, err)
				}
				if strings.Contains(c.String(), "s3cret") {
					t.Error("String() shows the password")
				}
				return
			}
			if !errors.Is(err, agent.ErrBadCredential) {
				t.Fatalf("got %v, want ErrBadCredential", err)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Error("the error shows the password")
			}
		})
	}
}

func TestImageAuthority(t *testing.T) {
	tests := []struct {
		name, ref, want string
	}{
		{"a host with a port keeps the port", "hub.nationtech.io:5000/example/api@sha256:abc", "hub.nationtech.io:5000"},
		{"a host without a port has none", "hub.nationtech.io/example/api:v1", "hub.nationtech.io"},
		{"the host is lower-cased", "Hub.NationTech.IO/x:v1", "hub.nationtech.io"},
		{"an image without a registry host is on docker.io", "library/busybox:1", "docker.io"},
		{"a bare image name is on docker.io", "busybox:1", "docker.io"},
		{"localhost is a registry host", "localhost/fleet-base:latest", "localhost"},
		{"an IP and port is a registry host", "127.0.0.1:5000/app@sha256:abc", "127.0.0.1:5000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := agent.ImageAuthority(tc.ref); got != tc.want {
				t.Errorf("ImageAuthority(%q) = %q, want %q", tc.ref, got, tc.want)
			}
		})
	}
	t.Run("Docker Hub aliases normalise to docker.io", func(t *testing.T) {
		for _, a := range []string{"index.docker.io", "registry-1.docker.io", "https://index.docker.io/"} {
			if got := agent.NormaliseAuthority(a); got != "docker.io" {
				t.Errorf("%s → %s", a, got)
			}
		}
	})
	t.Run("a port makes a different authority", func(t *testing.T) {
		if agent.NormaliseAuthority("hub.example:5000") == agent.NormaliseAuthority("hub.example") {
			t.Error("hub.example:5000 and hub.example compare equal")
		}
	})
}
