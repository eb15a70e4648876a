package fleetview_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

func TestMockServesEveryPage(t *testing.T) {
	ctx := context.Background()
	mock := fleetview.Mock(42, 2000)
	var src fleetview.Source = mock
	ov, err := src.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ov.Devices.Total != 2000 || ov.Devices.Online == 0 || ov.Devices.Stale == 0 || ov.Devices.Offline == 0 {
		t.Errorf("the mock's liveness is not mixed: %+v", ov.Devices)
	}
	phases := map[string]int{}
	for _, p := range ov.Deployments {
		phases[p.Phase] = p.Count
	}
	if phases["Succeeded"] == 0 || phases["Failed"] == 0 || phases["Progressing"] == 0 || phases["Canary"] == 0 {
		t.Errorf("the mock's Deployments are not in every phase: %+v", ov.Deployments)
	}
	if ov.Alerts.Total == 0 || ov.Quarantined != 2 {
		t.Errorf("alerts %+v, quarantined %d: want alerts and 2 quarantined", ov.Alerts, ov.Quarantined)
	}
	page, err := src.Devices(ctx, fleetview.DeviceQuery{Selector: "region=eu-west", Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 20 || page.Matched >= page.Total {
		t.Errorf("page of eu-west devices: %d items, %d matched of %d", len(page.Items), page.Matched, page.Total)
	}
	deps, err := src.Deployments(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var degraded *fleetview.DeploymentDetail
	for _, d := range deps {
		dd, err := src.Deployment(ctx, d.Namespace, d.Name)
		if err != nil {
			t.Fatal(err)
		}
		if dd.Degraded != nil {
			degraded = &dd
		}
		if len(dd.Devices) == 0 || len(dd.Revisions) == 0 || dd.Stage == "" {
			t.Errorf("Deployment %s/%s: %d device rows, %d revisions, stage %q", d.Namespace, d.Name, len(dd.Devices), len(dd.Revisions), dd.Stage)
		}
		if dd.Canary && dd.CanaryStage == nil {
			t.Errorf("Deployment %s/%s has canaries but no canary stage", d.Namespace, d.Name)
		}
	}
	if degraded == nil || degraded.Phase != "Succeeded" || len(degraded.Degraded.Devices) != degraded.Degraded.Count || degraded.Degraded.Count == 0 {
		t.Fatalf("the mock has no Succeeded Deployment that is Degraded, naming its devices: %+v", degraded)
	}
	sick, err := src.Device(ctx, degraded.Degraded.Devices[0].Device)
	if err != nil {
		t.Fatal(err)
	}
	crashing := false
	for _, w := range sick.Workloads {
		for _, c := range w.Containers {
			crashing = crashing || (w.Degraded != "" && c.Restarts > 0 && c.ExitCode != 0)
		}
	}
	if !crashing {
		t.Errorf("degraded device %s's containers show no crash: %+v", sick.ID, sick.Workloads)
	}
	alerts, err := src.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[fleetview.AlertKind]bool{}
	for _, a := range alerts {
		kinds[a.Kind] = true
	}
	if !kinds[fleetview.AlertDeploymentDegraded] || !kinds[fleetview.AlertRolloutStalled] {
		t.Errorf("alert kinds %v: want deployment-degraded and rollout-stalled", kinds)
	}
	dev, err := src.Device(ctx, page.Items[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(dev.Deployments) == 0 || len(dev.Timeline) == 0 || len(dev.Workloads) == 0 {
		t.Errorf("device %s: %d Deployments, %d timeline entries, %d Deployments with containers", dev.ID, len(dev.Deployments), len(dev.Timeline), len(dev.Workloads))
	}
	trs, err := src.TaskRuns(ctx)
	if err != nil || len(trs) != 2 {
		t.Fatalf("TaskRuns: %v, %v", trs, err)
	}
	tr, err := src.TaskRun(ctx, trs[0].Namespace, trs[0].Name)
	if err != nil || len(tr.Results) == 0 {
		t.Fatalf("TaskRun: %d results, %v", len(tr.Results), err)
	}
	trend, err := src.Trend(ctx)
	if err != nil || len(trend.Hours) != fleetview.TrendHours {
		t.Fatalf("trend: %d hours, %v", len(trend.Hours), err)
	}
	if _, err := src.FleetAt(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	if err := mock.Run(ended); err != nil {
		t.Errorf("Run until its context ends: %v", err)
	}
	if err := mock.Run(ended); !errors.Is(err, fleetview.ErrAlreadyRunning) {
		t.Errorf("a second Run: %v, want ErrAlreadyRunning", err)
	}
	if _, err := src.Device(ctx, "no-such-device"); !errors.Is(err, fleetview.ErrNotFound) {
		t.Errorf("an unknown device: %v, want ErrNotFound", err)
	}
}
