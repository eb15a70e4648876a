package dashboard

import (
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
)

func TestEventNamesBreakOnlyBetweenWords(t *testing.T) {
	tests := []struct {
		name string
		in   events.Type
		want string
	}{
		{"a break after the dot and each hyphen", "rollout.canaries-converged", `<code class="event">rollout.<wbr>canaries-<wbr>converged</code>`},
		{"markup in a type is escaped", `x.<b>`, `<code class="event">x.<wbr>&lt;b&gt;</code>`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(eventName(tc.in)); got != tc.want {
				t.Errorf("eventName(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.Contains(string(eventName(tc.in)), "<b>") {
				t.Error("unescaped markup")
			}
		})
	}
}
