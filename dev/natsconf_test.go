package dev

import (
	"strings"
	"testing"
)

func TestServerConfigAddsOnlyTheAdminUserAndNoSecretFromTheEnvironment(t *testing.T) {
	s, err := loadSecrets(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := serverConfig(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`user: "fleet-dev-admin"`, `auth_users: [ "fleet-dev-admin", "fleet-authcallout"`,
		`FLEET_DEV_ADMIN_PASSWORD: "` + s.adminPassword + `"`, "xkey: $FLEET_CALLOUT_XKEY"} {
		if !strings.Contains(conf, want) {
			t.Errorf("server configuration lacks %q", want)
		}
	}
}
