package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

func TestTheFloodPlanPublishesOnEveryReportKindOfADevice(t *testing.T) {
	target := floodTarget{Namespace: "prod", Deployment: "web", UID: "uid-1", Generation: 3, RevisionID: "rev-1", Targets: 2}
	for _, tc := range []struct {
		name string
		only bool
	}{
		{name: "the full plan covers every report kind of the catalogue"},
		{name: "the workload-only plan covers the workload kind only", only: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := target
			tt.WorkloadOnly = tc.only
			plan, err := floodPlan(FlooderName(1), tt)
			if err != nil {
				t.Fatal(err)
			}
			got := map[events.ReportKind]bool{}
			for _, m := range plan {
				ref, err := events.ParseSubject(m.subject)
				if err != nil {
					t.Fatalf("the plan publishes on %q: %v", m.subject, err)
				}
				if ref.Keys.Device != FlooderName(1) {
					t.Errorf("the plan publishes on another device's subject %q", m.subject)
				}
				got[ref.Report] = true
			}
			want := map[events.ReportKind]bool{events.ReportWorkload: true}
			if !tc.only {
				for _, ti := range events.Catalogue() {
					if ti.Family == events.FamilyReport {
						want[ti.Report] = true
					}
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("report kinds the plan publishes on (-want +got):\n%s", diff)
			}
		})
	}
}
