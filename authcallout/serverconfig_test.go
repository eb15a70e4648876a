package authcallout_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
)

func TestServerConfigIsTheBlockOfSecurityMD(t *testing.T) {
	if callouttest.DocumentedConfig(t) != authcallout.ServerConfig {
		t.Error("authcallout.ServerConfig differs from the block in docs/security.md: copy the block into serverconfig.go")
	}
}

func TestServerConfigWithDefinesTheVariablesAndAddsOnlyTheStaticUser(t *testing.T) {
	v := authcallout.ConfigVars{CalloutPassword: "c-pw", ReaderPassword: "r-pw", SysPassword: "s-pw", Issuer: "AISSUER", XKey: "XKEY"}
	plain, err := authcallout.ServerConfigWith(v, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(plain, authcallout.ServerConfig) || strings.Contains(plain, "bypass-me") {
		t.Error("without a static user the configuration is not the documented one")
	}
	conf, err := authcallout.ServerConfigWith(v, &authcallout.StaticUser{Name: "bypass-me", Password: "b-pw", PasswordVar: "BYPASS_PASSWORD", Comment: "test only"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`FLEET_CALLOUT_PASSWORD: "c-pw"`, `FLEET_READER_PASSWORD: "r-pw"`, `FLEET_CALLOUT_SYS_PASSWORD: "s-pw"`,
		`FLEET_CALLOUT_ISSUER: "AISSUER"`, `FLEET_CALLOUT_XKEY: "XKEY"`, `BYPASS_PASSWORD: "b-pw"`,
		`{ user: "bypass-me", password: $BYPASS_PASSWORD }`, `auth_users: [ "bypass-me", "fleet-authcallout", `} {
		if !strings.Contains(conf, want) {
			t.Errorf("configuration lacks %q", want)
		}
	}
}

func TestThePingConstantsAreTheConfigurationsSettings(t *testing.T) {
	for _, line := range []string{
		fmt.Sprintf("\nping_interval: %q\n", authcallout.PingInterval.String()),
		fmt.Sprintf("\nping_max: %d\n", authcallout.PingMax),
	} {
		if !strings.Contains(authcallout.ServerConfig, line) {
			t.Errorf("ServerConfig lacks %q", line)
		}
	}
}
