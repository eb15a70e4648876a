package operator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

func trimmed(d *fleetv1.Device) *metav1.Condition {
	return meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReportTrimmed)
}

// TestADeviceReportOverTheBoundsIsTrimmedOnItsDevice: a device reporting
// 1,000 labels, a 16 KiB kernel string and an agent version with a
// right-to-left override gets 64 labels, a cut kernel and an escaped
// version on its Device, a condition saying what was dropped, and a count
// in the metric; a later report within bounds clears the condition.
func TestADeviceReportOverTheBoundsIsTrimmedOnItsDevice(t *testing.T) {
	e := newDevEnv(t)
	e.metrics = operator.NewMetrics()
	id := e.id("rpi-big")
	e.create(id, map[string]string{"role": "analyzer"})
	e.start(time.Minute)

	labels := map[string]string{}
	for i := range 1000 {
		labels[fmt.Sprintf("k%04d", i)] = "v"
	}
	e.report(id, events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: strings.Repeat("6", 16<<10),
		AgentVersion: "v1.4\u202e2-exe", Labels: labels})
	d := e.waitDevice(id, "the trimmed inventory", func(d *fleetv1.Device) bool {
		return d.Status.Inventory != nil && d.Status.Inventory.Arch == "arm64" && d.Labels["k0000"] == "v"
	})
	t.Run("the first 64 reported labels in key order are mirrored, and the admin's", func(t *testing.T) {
		want := map[string]string{"role": "analyzer"}
		for i := range operator.MaxReportedLabels {
			want[fmt.Sprintf("k%04d", i)] = "v"
		}
		if diff := cmp.Diff(want, d.Labels); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
		if len(d.Status.ReportedLabels) != operator.MaxReportedLabels {
			t.Errorf("%d reported labels owned, want %d", len(d.Status.ReportedLabels), operator.MaxReportedLabels)
		}
	})
	t.Run("the kernel is cut and the agent version escaped", func(t *testing.T) {
		want := &fleetv1.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64",
			Kernel: strings.Repeat("6", operator.MaxInventoryField-len("…")) + "…", AgentVersion: `v1.4\u202e2-exe`}
		if diff := cmp.Diff(want, d.Status.Inventory); diff != "" {
			t.Errorf("inventory (-want +got):\n%s", diff)
		}
	})
	t.Run("a condition says what was dropped", func(t *testing.T) {
		c := trimmed(d)
		want := "the device's last inventory is over the bounds of a Device: dropped 936 of 1,000 reported labels (at most 64 labels, 4,096 bytes); " +
			"inventory.kernel truncated from 16,384 to 256 bytes"
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != fleetv1.ReasonReportOverBounds || c.Message != want {
			t.Errorf("ReportTrimmed condition %+v, want True, %s, %q", c, fleetv1.ReasonReportOverBounds, want)
		}
	})
	t.Run("the metric counts the report by what was cut", func(t *testing.T) {
		for _, field := range []string{"labels", "inventory.kernel"} {
			if v, _ := scrape(t, e.metrics, operator.MetricDeviceReportsTrimmed, map[string]string{"field": field}); v < 1 {
				t.Errorf("%s{field=%q} = %v, want at least 1", operator.MetricDeviceReportsTrimmed, field, v)
			}
		}
		if v, _ := scrape(t, e.metrics, operator.MetricDeviceReportsTrimmed, map[string]string{"field": "inventory.os"}); v != 0 {
			t.Errorf("%s{field=inventory.os} = %v, want 0", operator.MetricDeviceReportsTrimmed, v)
		}
	})
	t.Run("kubectl shows the agent version escaped", func(t *testing.T) {
		for _, args := range [][]string{{"get", "fdev", id, "-n", e.ns}, {"get", "fdev", id, "-n", e.ns, "-o", "wide"}} {
			out, err := e.srv.Kubectl(e.ctx, nil, args...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(out), `v1.4\u202e2-exe`) || strings.ContainsRune(string(out), '\u202e') {
				t.Errorf("kubectl %s:\n%s\nwant the agent version shown as v1.4\\u202e2-exe", strings.Join(args, " "), out)
			}
		}
	})
	t.Run("a later report within bounds clears the condition and restores the labels", func(t *testing.T) {
		e.report(id, events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: "6.1.0-18-arm64",
			AgentVersion: "v1.4.3", Labels: map[string]string{"zone": "lab-a"}})
		d := e.waitDevice(id, "the condition cleared", func(d *fleetv1.Device) bool {
			return trimmed(d) == nil && d.Status.Inventory != nil && d.Status.Inventory.AgentVersion == "v1.4.3" && len(d.Labels) == 2
		})
		if diff := cmp.Diff(map[string]string{"role": "analyzer", "zone": "lab-a"}, d.Labels); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
	})
}

// TestEveryHiddenCharacterADeviceReportsIsEscapedOnItsDevice: the
// injection suite's hidden text (poisontest.Hidden) in every inventory
// string reaches the Device escaped, in the status and in kubectl's output.
func TestEveryHiddenCharacterADeviceReportsIsEscapedOnItsDevice(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-hidden")
	e.create(id, nil)
	e.start(time.Minute)
	h := poisontest.Hidden
	e.report(id, events.DeviceInventory{OS: h, Arch: h, Kernel: h, AgentVersion: h})
	d := e.waitDevice(id, "the inventory", func(d *fleetv1.Device) bool { return d.Status.Inventory != nil })
	inv := d.Status.Inventory
	for name, s := range map[string]string{"os": inv.OS, "arch": inv.Arch, "kernel": inv.Kernel, "agentVersion": inv.AgentVersion} {
		if strings.ContainsFunc(s, events.Invisible) || !strings.HasPrefix(s, `v1\u202egnp.exe`) {
			t.Errorf("inventory.%s = %q: a hidden character is written raw", name, s)
		}
	}
	if c := trimmed(d); c != nil {
		t.Errorf("escaping is not trimming: %+v", c)
	}
	out, err := e.srv.Kubectl(e.ctx, nil, "get", "fdev", id, "-n", e.ns, "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsFunc(string(out), func(r rune) bool { return r != '\n' && events.Invisible(r) }) {
		t.Errorf("kubectl get fdev -o wide prints a hidden character:\n%q", out)
	}
}

// TestAnOverBoundsReportLeavesOtherDevicesAlone: the bound is per report;
// another device's Device is untouched by it and carries no condition.
func TestAnOverBoundsReportLeavesOtherDevicesAlone(t *testing.T) {
	e := newDevEnv(t)
	big, small := e.id("rpi-big"), e.id("rpi-small")
	e.create(big, nil)
	e.create(small, nil)
	e.start(time.Minute)
	labels := map[string]string{}
	for i := range 100 {
		labels[fmt.Sprintf("k%04d", i)] = "v"
	}
	e.report(big, events.DeviceInventory{OS: "x", Arch: "arm64", Labels: labels})
	e.report(small, events.DeviceInventory{OS: "x", Arch: "arm64", Labels: map[string]string{"zone": "a"}})
	e.waitDevice(big, "the trimmed condition", func(d *fleetv1.Device) bool { return trimmed(d) != nil })
	d := e.waitDevice(small, "the inventory", func(d *fleetv1.Device) bool { return d.Labels["zone"] == "a" })
	if c := trimmed(d); c != nil {
		t.Errorf("a device within bounds has a ReportTrimmed condition: %+v", c)
	}
}

// TestTheAPIServerRefusesAnInventoryStringOverTheBound: the CRD holds the
// bound too, whoever writes the status.
func TestTheAPIServerRefusesAnInventoryStringOverTheBound(t *testing.T) {
	e := newDevEnv(t)
	d := e.create(e.id("rpi-crd"), nil)
	d.Status.Inventory = &fleetv1.DeviceInventory{Kernel: strings.Repeat("k", operator.MaxInventoryField+1)}
	err := e.c.Status().Update(e.ctx, d)
	if err == nil || !strings.Contains(err.Error(), "status.inventory.kernel") {
		t.Errorf("a %d-byte kernel string: %v, want a refusal naming status.inventory.kernel", operator.MaxInventoryField+1, err)
	}
	d.Status.Inventory.Kernel = strings.Repeat("k", operator.MaxInventoryField)
	if err := e.c.Status().Update(e.ctx, d); err != nil {
		t.Errorf("a %d-byte kernel string: %v", operator.MaxInventoryField, err)
	}
}

// TestADevicesTimeZoneIsShownOnItsDeviceAndAHostileOneIgnored: the time
// zone an agent reports (its inventory's timeZone) is projected into
// status.inventory.timeZone; a hostile one (a path out of the tz
// database) is left out, said by the ReportTrimmed condition and counted,
// and the rest of the inventory is projected as before.
func TestADevicesTimeZoneIsShownOnItsDeviceAndAHostileOneIgnored(t *testing.T) {
	e := newDevEnv(t)
	e.metrics = operator.NewMetrics()
	id := e.id("rpi-tz")
	e.create(id, nil)
	e.start(time.Minute)
	tests := []struct {
		name      string
		zone      string
		want      string
		condition string // the ReportTrimmed message ("" none)
	}{
		{"a reported IANA zone is shown", "Europe/Paris", "Europe/Paris", ""},
		{"a path out of the tz database is left out and said", "../../etc/passwd", "",
			"the device's last inventory is over the bounds of a Device: inventory.timeZone of 16 bytes ignored: not an IANA time zone of the tz database"},
		{"an inventory without a zone (an older agent) shows none", "", "", ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			version := fmt.Sprintf("v1.%d", i)
			e.report(id, events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", AgentVersion: version, TimeZone: tc.zone})
			d := e.waitDevice(id, "the inventory of "+version, func(d *fleetv1.Device) bool {
				return d.Status.Inventory != nil && d.Status.Inventory.AgentVersion == version
			})
			want := &fleetv1.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", AgentVersion: version, TimeZone: tc.want}
			if diff := cmp.Diff(want, d.Status.Inventory); diff != "" {
				t.Errorf("inventory (-want +got):\n%s", diff)
			}
			c, msg := trimmed(d), ""
			if c != nil {
				msg = c.Message
			}
			if msg != tc.condition {
				t.Errorf("ReportTrimmed %q, want %q", msg, tc.condition)
			}
		})
	}
	if v, _ := scrape(t, e.metrics, operator.MetricDeviceReportsTrimmed, map[string]string{"field": "inventory.timeZone"}); v < 1 {
		t.Errorf("%s{field=inventory.timeZone} = %v, want at least 1", operator.MetricDeviceReportsTrimmed, v)
	}
}
