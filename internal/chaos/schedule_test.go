package chaos_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/internal/chaos"
)

func scheduleOptions(seed uint64) chaos.ScheduleOptions {
	return chaos.ScheduleOptions{Seed: seed, Duration: 5 * time.Minute,
		Targets: map[chaos.Kind]int{chaos.KindNATS: 3, chaos.KindOperator: 2, chaos.KindAgent: 4},
		MinGap:  2 * time.Second, MaxGap: 8 * time.Second, MinDown: time.Second, MaxDown: 6 * time.Second}
}

func TestOneSeedGivesOneScheduleWithOneProcessDownAtATime(t *testing.T) {
	a, err := chaos.NewSchedule(scheduleOptions(42))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := chaos.NewSchedule(scheduleOptions(42))
	if diff := cmp.Diff(a, b); diff != "" {
		t.Fatalf("two schedules of seed 42 differ:\n%s", diff)
	}
	c, _ := chaos.NewSchedule(scheduleOptions(43))
	if cmp.Equal(a, c) {
		t.Error("seeds 42 and 43 gave the same schedule")
	}
	o := scheduleOptions(42)
	kinds := map[chaos.Kind]bool{}
	for i, f := range a {
		kinds[f.Kind] = true
		if f.At >= o.Duration {
			t.Errorf("fault %d at %s, after the run's %s", i, f.At, o.Duration)
		}
		if f.Target < 0 || f.Target >= o.Targets[f.Kind] {
			t.Errorf("fault %d kills %s #%d of %d", i, f.Kind, f.Target, o.Targets[f.Kind])
		}
		if f.Down < o.MinDown || f.Down > o.MaxDown {
			t.Errorf("fault %d down %s, outside %s..%s", i, f.Down, o.MinDown, o.MaxDown)
		}
		if i > 0 && a[i-1].At+a[i-1].Down+o.MinGap > f.At {
			t.Errorf("fault %d at %s starts before fault %d's process is back and the gap has passed (%s + %s)", i, f.At, i-1, a[i-1].At, a[i-1].Down)
		}
	}
	if len(kinds) != 3 {
		t.Errorf("5 minutes of faults killed only %v", kinds)
	}
	if s := chaos.FormatSchedule(42, a); !strings.Contains(s, "seed 42") || strings.Count(s, "SIGKILL") != len(a) {
		t.Errorf("formatted schedule:\n%s", s)
	}
}

func TestScheduleOptionsNameTheFieldToFix(t *testing.T) {
	tests := []struct {
		name string
		edit func(*chaos.ScheduleOptions)
		want string
	}{
		{"no duration", func(o *chaos.ScheduleOptions) { o.Duration = 0 }, "duration"},
		{"no targets", func(o *chaos.ScheduleOptions) { o.Targets = nil }, "no targets"},
		{"a gap range upside down", func(o *chaos.ScheduleOptions) { o.MaxGap = time.Second }, "MinGap"},
		{"no down time", func(o *chaos.ScheduleOptions) { o.MinDown = 0 }, "MinDown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := scheduleOptions(1)
			tc.edit(&o)
			if _, err := chaos.NewSchedule(o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSchedule: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
