package podmantest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseRegistryEnv(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Registry
		wantErr error
	}{
		{
			name: "a complete file gives the registry",
			in:   "FLEET_TEST_REGISTRY=127.0.0.1:5000\nFLEET_TEST_REGISTRY_USER=fleet-test\nFLEET_TEST_REGISTRY_PASSWORD=p=w\n",
			want: Registry{Addr: "127.0.0.1:5000", Username: "fleet-test", Password: "p=w"},
		},
		{
			name:    "a file without the password is incomplete",
			in:      "FLEET_TEST_REGISTRY=127.0.0.1:5000\nFLEET_TEST_REGISTRY_USER=fleet-test\n",
			wantErr: ErrRegistryFile,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRegistryEnv([]byte(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("registry (-want +got):\n%s", diff)
			}
		})
	}
}

func TestARegistryNeverPrintsItsPassword(t *testing.T) {
	r := Registry{Addr: "127.0.0.1:5000", Username: "fleet-test", Password: "s3cret-value"}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(verb, r); strings.Contains(out, r.Password) {
			t.Errorf("%s prints the password: %s", verb, out)
		}
	}
}

func TestOwnedByMatchesTheTestAndItsSubtests(t *testing.T) {
	tests := []struct {
		label string
		want  bool
	}{
		{"TestX", true},
		{"TestX/sub", true},
		{"TestXY", false},
		{"TestY/TestX", false},
	}
	for _, tt := range tests {
		if got := ownedBy(tt.label, "TestX"); got != tt.want {
			t.Errorf("ownedBy(%q, TestX) = %v, want %v", tt.label, got, tt.want)
		}
	}
}
