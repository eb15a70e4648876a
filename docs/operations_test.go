package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestOperationsSaysHowDevicesReachNATS keeps operations.md's device
// section true to the production overlay: the Service devices connect
// through, its port, the TLS Secret, and — because the overlay lets plain
// connections in — that devices must use tls://, as agent.md's example
// does.
func TestOperationsSaysHowDevicesReachNATS(t *testing.T) {
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	svc := read("../deploy/overlays/production/nats-devices.yaml")
	name := regexp.MustCompile(`(?m)^  name: (\S+)`).FindStringSubmatch(svc)
	port := regexp.MustCompile(`port: (\d+),`).FindStringSubmatch(svc)
	secret := regexp.MustCompile(`secretName: (\S+)`).FindStringSubmatch(read("../deploy/overlays/production/nats-tls-patch.yaml"))
	if name == nil || port == nil || secret == nil || !strings.Contains(svc, "type: LoadBalancer") {
		t.Fatal("the production overlay's nats-devices Service or nats-tls Secret changed its layout")
	}
	_, section, ok := strings.Cut(read("operations.md"), "### 4. Devices connect with `tls://` through `"+name[1]+"`")
	if !ok {
		t.Fatalf("operations.md has no section ### 4. Devices connect with `tls://` through `%s`", name[1])
	}
	section, _, _ = strings.Cut(section, "\n### ")
	section = strings.Join(strings.Fields(section), " ") // the doc's line breaks are layout
	for _, want := range []string{"`LoadBalancer` on port " + port[1], "`" + secret[1] + "`", "tls://nats.example.com:" + port[1]} {
		if !strings.Contains(section, want) {
			t.Errorf("operations.md's device section does not say %q", want)
		}
	}
	if strings.Contains(read("../deploy/overlays/production/tls.conf"), "allow_non_tls: true") && !strings.Contains(section, "**a device must use `tls://`**") {
		t.Error("the production NATS accepts plain connections, and operations.md no longer says a device must use tls://")
	}
	if agent := read("agent.md"); !strings.Contains(agent, "fleet-agent --nats-url tls://") {
		t.Error("agent.md's example does not connect with tls://")
	}
}
