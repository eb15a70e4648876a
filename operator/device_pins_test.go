package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// kubectlPatch merge-patches the Device with the real kubectl, as an admin
// pins or unpins a label, and returns kubectl's error.
func (e *devEnv) kubectlPatch(id, patch string) error {
	e.t.Helper()
	_, err := e.srv.Kubectl(e.ctx, nil, "patch", "fdev", id, "-n", e.ns, "--type", "merge", "-p", patch)
	return err
}

// pin merge-patches the Device's spec with the real kubectl and fails the
// test when it is refused.
func (e *devEnv) pin(id, patch string) {
	e.t.Helper()
	if err := e.kubectlPatch(id, patch); err != nil {
		e.t.Fatalf("pin %s: %v", patch, err)
	}
}

// startStoppable runs an operator with the Device controller and returns a
// function that stops it and waits until it has stopped.
func (e *devEnv) startStoppable(staleAfter time.Duration) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- operator.Run(ctx, operator.Options{RESTConfig: e.srv.RESTConfig(), Store: e.store, Reader: e.store, IntentKV: e.intent,
			Devices: e.store, StaleAfter: staleAfter, Logger: logger, SeveralPerProcess: true})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("operator.Run: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return stop
}

// sub returns e for the subtest t: its helpers fail t, not the parent.
func (e *devEnv) sub(t *testing.T) *devEnv {
	c := *e
	c.t = t
	return &c
}

func inventory(kernel string, labels map[string]string) events.DeviceInventory {
	return events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: kernel, AgentVersion: "1.0.0", Labels: labels}
}

func labelsOverriddenCondition(d *fleetv1.Device) *metav1.Condition {
	return meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionLabelsOverridden)
}

// TestLabelPinsOverrideTheReportsUntilUndone: each case is one device that
// reports, is pinned (spec.labels, spec.removedLabels) with kubectl patch,
// reports again, has its pin undone, and reports once more: the labels
// follow the pin while it is there and the reports once it is gone.
func TestLabelPinsOverrideTheReportsUntilUndone(t *testing.T) {
	tests := []struct {
		name string
		// admin are the Device's labels at creation.
		admin map[string]string
		// report is the device's first report; again its second, while
		// pinned; later its third, once the pin is undone.
		report, again, later map[string]string
		pin, undo            string
		// pinned are the labels while pinned (after again), reported
		// status.reportedLabels then, undone the labels after later.
		pinned, reported, undone map[string]string
		// overridden is the LabelsOverridden message while pinned.
		overridden string
	}{
		{name: "a pinned value overrides the reported one, and undone the key follows the reports again",
			report: map[string]string{"site": "paris", "zone": "a"}, again: map[string]string{"site": "paris", "zone": "b"},
			pin: `{"spec":{"labels":{"site":"lyon"}}}`, pinned: map[string]string{"site": "lyon", "zone": "b"},
			reported:   map[string]string{"site": "paris", "zone": "b"},
			overridden: `site: reported "paris", pinned "lyon"`,
			undo:       `{"spec":{"labels":null}}`, later: map[string]string{"site": "nice", "zone": "c"},
			undone: map[string]string{"site": "nice", "zone": "c"}},
		{name: "a pinned removal keeps a reported key off, and undone the key follows the reports again",
			report: map[string]string{"rack": "r1", "zone": "a"}, again: map[string]string{"rack": "r2", "zone": "b"},
			pin: `{"spec":{"removedLabels":["rack"]}}`, pinned: map[string]string{"zone": "b"},
			reported:   map[string]string{"rack": "r2", "zone": "b"},
			overridden: `rack: reported "r2", pinned absent`,
			undo:       `{"spec":{"removedLabels":null}}`, later: map[string]string{"rack": "r3", "zone": "c"},
			undone: map[string]string{"rack": "r3", "zone": "c"}},
		{name: "a pin of a key the device does not report adds it, and undone the key is removed",
			report: map[string]string{"zone": "a"}, again: map[string]string{"zone": "b"},
			pin: `{"spec":{"labels":{"site":"lyon"}}}`, pinned: map[string]string{"site": "lyon", "zone": "b"},
			reported:   map[string]string{"zone": "b"},
			overridden: `site: not reported, pinned "lyon"`,
			undo:       `{"spec":{"labels":{"site":null}}}`, later: map[string]string{"zone": "c"},
			undone: map[string]string{"zone": "c"}},
		{name: "a pin takes a key an admin labelled, and undone the key is the reports'",
			admin:  map[string]string{"site": "manual"},
			report: map[string]string{"site": "paris", "zone": "a"}, again: map[string]string{"site": "paris", "zone": "b"},
			pin: `{"spec":{"labels":{"site":"lyon"}}}`, pinned: map[string]string{"site": "lyon", "zone": "b"},
			reported:   map[string]string{"site": "paris", "zone": "b"},
			overridden: `site: reported "paris", pinned "lyon"`,
			undo:       `{"spec":{"labels":null}}`, later: map[string]string{"site": "nice", "zone": "c"},
			undone: map[string]string{"site": "nice", "zone": "c"}},
		{name: "an admin label on an unpinned key stays the admin's",
			admin:  map[string]string{"role": "analyzer"},
			report: map[string]string{"role": "other", "zone": "a"}, again: map[string]string{"role": "other", "zone": "b"},
			pin: `{"spec":{"labels":{"site":"lyon"}}}`, pinned: map[string]string{"role": "analyzer", "site": "lyon", "zone": "b"},
			reported:   map[string]string{"zone": "b"},
			overridden: `site: not reported, pinned "lyon"`,
			undo:       `{"spec":{"labels":null}}`, later: map[string]string{"role": "other", "zone": "c"},
			undone: map[string]string{"role": "analyzer", "zone": "c"}},
	}
	env := newDevEnv(t)
	env.start(time.Minute)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := env.sub(t)
			id := e.id(fmt.Sprintf("pin-%d", i))
			e.create(id, tc.admin)
			e.report(id, inventory("6.1.0", tc.report))
			e.waitDevice(id, "the first report", func(d *fleetv1.Device) bool { return d.Labels["zone"] == "a" })

			e.pin(id, tc.pin)
			e.report(id, inventory("6.1.1", tc.again))
			d := e.waitDevice(id, "the pin and the second report", func(d *fleetv1.Device) bool {
				c := labelsOverriddenCondition(d)
				return d.Labels["zone"] == "b" && c != nil && c.ObservedGeneration == d.Generation && len(d.Status.PinnedLabels) > 0
			})
			if diff := cmp.Diff(tc.pinned, d.Labels); diff != "" {
				t.Errorf("labels while pinned (-want +got):\n%s", diff)
			}
			c := labelsOverriddenCondition(d)
			if c.Status != metav1.ConditionTrue || c.Reason != fleetv1.ReasonLabelsPinned || c.Message != tc.overridden {
				t.Errorf("LabelsOverridden %s/%s %q, want True/%s %q", c.Status, c.Reason, c.Message, fleetv1.ReasonLabelsPinned, tc.overridden)
			}
			if diff := cmp.Diff(tc.reported, maps(d.Status.ReportedLabels)); diff != "" {
				t.Errorf("reportedLabels while pinned (-want +got):\n%s", diff)
			}

			e.pin(id, tc.undo)
			e.report(id, inventory("6.1.2", tc.later))
			d = e.waitDevice(id, "the undo and the third report", func(d *fleetv1.Device) bool {
				return d.Labels["zone"] == "c" && labelsOverriddenCondition(d) == nil && len(d.Status.PinnedLabels) == 0
			})
			if diff := cmp.Diff(tc.undone, d.Labels); diff != "" {
				t.Errorf("labels once undone (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAPinSurvivesReportsAndAnOperatorRestart: from the pin on, no version
// of the Device carries the reported value, through later reports and a
// restart of the operator (seen on a watch, which gives every version).
func TestAPinSurvivesReportsAndAnOperatorRestart(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	stop := e.startStoppable(time.Minute)
	e.report(id, inventory("6.1.0", map[string]string{"site": "paris", "zone": "a"}))
	e.waitDevice(id, "the report", func(d *fleetv1.Device) bool { return d.Labels["site"] == "paris" })

	t.Run("a plain label edit of a reported key is reverted to the report", func(t *testing.T) {
		e.label(id, "site", "lyon")
		e.waitDevice(id, "the report's value back", func(d *fleetv1.Device) bool { return d.Labels["site"] == "paris" })
	})

	e.pin(id, `{"spec":{"labels":{"site":"lyon"}}}`)
	d := e.waitDevice(id, "the pin", func(d *fleetv1.Device) bool { return d.Labels["site"] == "lyon" })
	w, err := e.c.Watch(e.ctx, &fleetv1.DeviceList{}, client.InNamespace(e.ns),
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id), Raw: &metav1.ListOptions{ResourceVersion: d.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	e.report(id, inventory("6.1.1", map[string]string{"site": "paris", "zone": "b"}))
	e.waitDevice(id, "the second report", func(d *fleetv1.Device) bool { return d.Labels["zone"] == "b" })
	stop()
	e.start(time.Minute)
	e.report(id, inventory("6.1.2", map[string]string{"site": "marseille", "zone": "c"}))
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			got, isDevice := ev.Object.(*fleetv1.Device)
			if !isDevice {
				t.Fatalf("watch event %s: %+v", ev.Type, ev.Object)
			}
			if got.Labels["site"] != "lyon" {
				t.Fatalf("a version of the Device has site=%q, want the pinned lyon in every version; labels %v", got.Labels["site"], got.Labels)
			}
			if got.Labels["zone"] == "c" && maps(got.Status.ReportedLabels)["site"] == "marseille" {
				return // the restarted operator applied the third report
			}
		case <-e.ctx.Done():
			t.Fatal(e.ctx.Err())
		}
	}
}

func TestLabelPinsAreCheckedAtAdmission(t *testing.T) {
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	manyJSON := strings.Builder{}
	for k := range many {
		if manyJSON.Len() > 0 {
			manyJSON.WriteString(",")
		}
		fmt.Fprintf(&manyJSON, "%q:\"v\"", k)
	}
	tests := []struct {
		name, patch string
		want        []string
	}{
		{"blacklist cannot be pinned", `{"spec":{"labels":{"blacklist":"false"}}}`,
			[]string{"spec.labels: key blacklist is reserved to the control plane", "set it on metadata.labels (kubectl label)"}},
		{"a key under fleet.nationtech.io/ cannot be pinned", `{"spec":{"labels":{"fleet.nationtech.io/owner":"me"}}}`,
			[]string{"spec.labels: key fleet.nationtech.io/owner is reserved to the control plane"}},
		{"the absence of blacklist cannot be pinned", `{"spec":{"removedLabels":["blacklist"]}}`,
			[]string{"spec.removedLabels: blacklist is reserved to the control plane", "remove it from metadata.labels (kubectl label)"}},
		{"a key that is no label key is refused", `{"spec":{"labels":{"bad key!":"x"}}}`,
			[]string{"spec.labels: key bad key! is no label key", "e.g. site or example.com/site"}},
		{"a value that is no label value is refused", `{"spec":{"labels":{"site":"not a value!"}}}`,
			[]string{"spec.labels[site]", "every value must be a label value"}},
		{"a value longer than 63 characters is refused", `{"spec":{"labels":{"site":"` + strings.Repeat("a", 64) + `"}}}`,
			[]string{"spec.labels.site: Too long", "63"}},
		{"a removed key that is no label key is refused", `{"spec":{"removedLabels":["-rack"]}}`,
			[]string{"spec.removedLabels: -rack is no label key"}},
		{"a key pinned to a value and to its absence is refused", `{"spec":{"labels":{"site":"lyon"},"removedLabels":["site"]}}`,
			[]string{"spec.removedLabels: site is also in spec.labels", "not both"}},
		{"more than 32 pinned values are refused", `{"spec":{"labels":{` + manyJSON.String() + `}}}`,
			[]string{"spec.labels: Too many", "at most 32"}},
	}
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := e.kubectlPatch(id, tc.patch)
			if err == nil {
				t.Fatalf("kubectl patch %s was accepted; spec %+v", tc.patch, e.get(id).Spec)
			}
			t.Logf("refused: %v", err)
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal does not say %q:\n%v", want, err)
				}
			}
		})
	}
	t.Run("a valid pin is accepted", func(t *testing.T) {
		e.pin(id, `{"spec":{"labels":{"example.com/site":"lyon","canary":"","zone":"a-1.b_2"},"removedLabels":["rack"]}}`)
		d := e.get(id)
		want := fleetv1.DeviceSpec{IdentitySubject: "sub-" + id,
			Labels: map[string]fleetv1.LabelValue{"example.com/site": "lyon", "canary": "", "zone": "a-1.b_2"}, RemovedLabels: []string{"rack"}}
		if diff := cmp.Diff(want, d.Spec); diff != "" {
			t.Errorf("spec (-want +got):\n%s", diff)
		}
	})
}

// TestPinLabels checks the pin rules on MergeReportedLabels's result, as
// the Device controller composes them.
func TestPinLabels(t *testing.T) {
	tests := []struct {
		name                    string
		labels, owned, reported map[string]string
		pins                    operator.LabelPins
		pinned                  []string
		wantLabels, wantOwned   map[string]string
		wantPinned              []string
	}{
		{name: "a pinned value replaces the reported one, which stays owned",
			labels: map[string]string{"site": "paris"}, owned: map[string]string{"site": "paris"}, reported: map[string]string{"site": "paris"},
			pins:       operator.LabelPins{Values: map[string]string{"site": "lyon"}},
			wantLabels: map[string]string{"site": "lyon"}, wantOwned: map[string]string{"site": "paris"}, wantPinned: []string{"site"}},
		{name: "a pinned removal keeps a reported key off",
			labels: map[string]string{"rack": "1"}, owned: map[string]string{"rack": "1"}, reported: map[string]string{"rack": "2"},
			pins:       operator.LabelPins{Removed: []string{"rack"}},
			wantLabels: map[string]string{}, wantOwned: map[string]string{"rack": "2"}, wantPinned: []string{"rack"}},
		{name: "a pin over an admin's label claims the reported key underneath",
			labels: map[string]string{"site": "manual"}, reported: map[string]string{"site": "paris"},
			pins:       operator.LabelPins{Values: map[string]string{"site": "lyon"}},
			wantLabels: map[string]string{"site": "lyon"}, wantOwned: map[string]string{"site": "paris"}, wantPinned: []string{"site"}},
		{name: "an undone pin of a reported key takes the reported value",
			labels: map[string]string{"site": "lyon"}, owned: map[string]string{"site": "paris"}, reported: map[string]string{"site": "paris"},
			pinned:     []string{"site"},
			wantLabels: map[string]string{"site": "paris"}, wantOwned: map[string]string{"site": "paris"}, wantPinned: []string{}},
		{name: "an undone pin of a key not reported removes it",
			labels: map[string]string{"site": "lyon", "zone": "a"}, owned: map[string]string{"zone": "a"}, reported: map[string]string{"zone": "a"},
			pinned:     []string{"site"},
			wantLabels: map[string]string{"zone": "a"}, wantOwned: map[string]string{"zone": "a"}, wantPinned: []string{}},
		{name: "an undone pinned removal brings the reported value back",
			labels: map[string]string{}, owned: map[string]string{"rack": "2"}, reported: map[string]string{"rack": "2"},
			pinned:     []string{"rack"},
			wantLabels: map[string]string{"rack": "2"}, wantOwned: map[string]string{"rack": "2"}, wantPinned: []string{}},
		{name: "pins apply before any report",
			labels: map[string]string{"role": "x"}, reported: nil,
			pins:       operator.LabelPins{Values: map[string]string{"site": "lyon"}, Removed: []string{"role"}},
			wantLabels: map[string]string{"site": "lyon"}, wantOwned: nil, wantPinned: []string{"role", "site"}},
		{name: "an undone pin before any report removes the key",
			labels: map[string]string{"site": "lyon"}, reported: nil, pinned: []string{"site"},
			wantLabels: map[string]string{}, wantOwned: nil, wantPinned: []string{}},
		{name: "a pin never sets or removes a reserved label",
			labels: map[string]string{"blacklist": "true"}, reported: map[string]string{},
			pins:       operator.LabelPins{Values: map[string]string{"fleet.nationtech.io/x": "1"}, Removed: []string{"blacklist"}},
			pinned:     []string{"blacklist"},
			wantLabels: map[string]string{"blacklist": "true"}, wantOwned: map[string]string{}, wantPinned: []string{}},
		{name: "an admin's label on a key never pinned is untouched",
			labels: map[string]string{"role": "x"}, reported: map[string]string{"role": "y"},
			pins:       operator.LabelPins{Values: map[string]string{"site": "lyon"}},
			wantLabels: map[string]string{"role": "x", "site": "lyon"}, wantOwned: map[string]string{}, wantPinned: []string{"site"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			labels, owned := tc.labels, tc.owned
			if tc.reported != nil {
				labels, owned = operator.MergeReportedLabels(tc.labels, operator.ClaimPinnedKeys(tc.owned, tc.pins, tc.pinned), tc.reported)
			}
			gotLabels, gotPinned := operator.PinLabels(labels, owned, tc.pins, tc.pinned)
			if diff := cmp.Diff(tc.wantLabels, gotLabels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantOwned, owned); diff != "" {
				t.Errorf("owned (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPinned, gotPinned); diff != "" {
				t.Errorf("pinned (-want +got):\n%s", diff)
			}
		})
	}
}
