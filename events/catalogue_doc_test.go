package events_test

import (
	"os"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
)

func TestEveryTypeIsInTheCatalogueDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range events.Catalogue() {
		if !strings.Contains(string(doc), "`"+string(ti.Type)+"`") {
			t.Errorf("docs/events.md does not list %s", ti.Type)
		}
	}
	for _, s := range []string{events.StreamIntent, events.StreamRollout, events.StreamReports, events.StreamTelemetry, events.StreamCommands, events.StreamAudit, events.BucketIntent, events.BucketIdentity} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/events.md does not describe %s", s)
		}
	}
}
