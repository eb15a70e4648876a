package devenv

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestTheCalloutConfigIsTheDocumentedOne(t *testing.T) {
	b, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```conf\n(# fleet-authcallout: NATS server configuration\n.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/security.md has no ```conf block starting with '# fleet-authcallout: NATS server configuration'")
	}
	if string(m[1]) != calloutConfig {
		t.Error("calloutConfig differs from the block in docs/security.md: copy the block into natsconf.go")
	}
}

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
