package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// Every figure the hold measures that has a goal is printed against it:
// the devices converged after the reconnects, and no re-authorisation
// refused (a refused one is a device cut off until its next try).
func TestTheHoldPrintsEachFigureAgainstItsGoal(t *testing.T) {
	tests := []struct {
		name    string
		refused uint64
		want    []string
	}{
		{"a hold with every reconnect authorised meets both goals", 0, []string{
			"goal        N=10 every device converged on the revision after the hold (no notification missed across 24 reconnects): converged in 1.5s: met",
			"goal        N=10 no re-authorisation refused over the hold (24 authorised): 0: met",
		}},
		{"a refused reconnect is printed as a goal not met", 2, []string{
			"goal        N=10 no re-authorisation refused over the hold (24 authorised): 2: NOT met",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			printHold(&out, Result{N: 10, TokenLifetime: 20 * time.Second,
				Hold: &HoldResult{Duration: time.Minute, CPU: time.Second, Allowed: 24, Refused: tt.refused, Converged: 1500 * time.Millisecond}})
			for _, w := range tt.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the hold's figures lack %q:\n%s", w, out.String())
				}
			}
		})
	}
}
