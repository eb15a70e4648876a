package operator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
)

// GroupSource answers which device groups a device belongs to. Production
// compositions provide one (for example from Zitadel); the public composition
// has none, and then a Deployment that sets allowedGroups matches no device.
type GroupSource interface {
	// Groups returns the groups of the device in the namespace.
	Groups(ctx context.Context, namespace, device string) ([]string, error)
}

// StaticGroups is a GroupSource from a fixed table: namespace → group →
// devices. It suits private compositions with a file and tests.
type StaticGroups struct {
	mu sync.RWMutex // guards table
	// table: namespace → device → sorted groups
	table map[string]map[string][]string
}

// GroupFile is the JSON form of a static group table:
//
//	{"namespaces": {"lab": {"analyzers": ["rpi-042", "rpi-043"]}}}
type GroupFile struct {
	Namespaces map[string]map[string][]string `json:"namespaces"`
}

// NewStaticGroups builds a source from namespace → group → devices.
func NewStaticGroups(namespaces map[string]map[string][]string) *StaticGroups {
	s := &StaticGroups{}
	s.Set(namespaces)
	return s
}

// LoadGroupFile reads a GroupFile.
func LoadGroupFile(path string) (*StaticGroups, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("group file: %w", err)
	}
	var f GroupFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("group file %s: %w (want {\"namespaces\": {\"<ns>\": {\"<group>\": [\"<device>\"]}}})", path, err)
	}
	return NewStaticGroups(f.Namespaces), nil
}

// Set replaces the table.
func (s *StaticGroups) Set(namespaces map[string]map[string][]string) {
	t := map[string]map[string][]string{}
	for ns, groups := range namespaces {
		t[ns] = map[string][]string{}
		for g, devices := range groups {
			for _, d := range devices {
				t[ns][d] = append(t[ns][d], g)
			}
		}
		for d := range t[ns] {
			slices.Sort(t[ns][d])
		}
	}
	s.mu.Lock()
	s.table = t
	s.mu.Unlock()
}

// Groups implements GroupSource.
func (s *StaticGroups) Groups(_ context.Context, namespace, device string) ([]string, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.table[namespace][device]), nil
}
