package fleetview_test

import (
	"context"
	"testing"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// BenchmarkDeviceList10000 is one device-list page of a 10,000-device fleet:
// list from the source, filter, sort and page. The figure is in
// docs/dashboard-data.md (the dashboard's bound is 300 ms of server time).
func BenchmarkDeviceList10000(b *testing.B) {
	ctx := context.Background()
	v := fleetview.Mock(1, 10000)
	for _, bc := range []struct {
		name string
		q    fleetview.DeviceQuery
	}{
		{"every device, first page", fleetview.DeviceQuery{}},
		{"selector", fleetview.DeviceQuery{Selector: "region=eu-west,tier in (edge),!blacklist", Limit: 100}},
		{"selector and search, a later page", fleetview.DeviceQuery{Selector: "tier=edge", Search: "RPI", Offset: 500, Limit: 100}},
		{"liveness and search miss", fleetview.DeviceQuery{Liveness: fleetview.LivenessStale, Search: "no-such-text"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := v.Devices(ctx, bc.q)
				if err != nil {
					b.Fatal(err)
				}
				if p.Total != 10000 {
					b.Fatalf("%d devices", p.Total)
				}
			}
		})
	}
}
