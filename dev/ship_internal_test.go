package dev

import (
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

func TestTheShipBuildCommandCompilesInOnlyTheAddressesThatMoved(t *testing.T) {
	for _, tc := range []struct {
		name                                   string
		issuer, bao, registry, namespace, want string
	}{
		{"the default addresses need no -ldflags", DefaultShipIssuer, DefaultShipOpenBao, DefaultShipRegistry, DefaultShipNamespace,
			"go build -tags containers_image_openpgp -o /d/bin/harmony ./examples/harmony_apply_deployment"},
		{"a registry on another port is compiled in", DefaultShipIssuer, DefaultShipOpenBao, "127.0.0.1:5002", DefaultShipNamespace,
			`go build -tags containers_image_openpgp -ldflags "-X main.devRegistry=127.0.0.1:5002" -o /d/bin/harmony ./examples/harmony_apply_deployment`},
		{"every moved address is compiled in, in a fixed order", "http://127.0.0.1:40001", "http://127.0.0.1:40002", "127.0.0.1:5002", "other",
			`go build -tags containers_image_openpgp -ldflags "-X main.devZitadel=http://127.0.0.1:40001 -X main.devOpenBao=http://127.0.0.1:40002 -X main.devRegistry=127.0.0.1:5002 -X main.devNamespace=other" -o /d/bin/harmony ./examples/harmony_apply_deployment`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := shipBuild("/d/bin/harmony", tc.issuer, tc.bao, tc.registry, tc.namespace); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestThePrintedShipParagraphSaysWhyWhenThereIsNoRegistry(t *testing.T) {
	for _, tc := range []struct {
		name string
		ship Ship
		want []string
	}{
		{"with a registry it prints the build, export and ship lines",
			Ship{Registry: "127.0.0.1:5000", Build: "go build x", Export: `export HARMONY_ZITADEL_KEY_JSON="$(cat /d/k.json)"`, Command: "cd e && harmony ship"},
			[]string{"  go build x\n", `  export HARMONY_ZITADEL_KEY_JSON="$(cat /d/k.json)"` + "\n", "  cd e && harmony ship\n", "pushes to 127.0.0.1:5000"}},
		{"without a registry it says why and prints no export line", Ship{Note: "no registry to push to (x): run `task`"},
			[]string{"not offered: no registry to push to (x): run `task`"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := shipSection(Info{Ship: tc.ship})
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			if tc.ship.Registry == "" && strings.Contains(got, "export") {
				t.Errorf("%q has an export line without a registry", got)
			}
		})
	}
}

// TestTheRegistryVariablesAreUsedInsteadOfTheFile: all three variables set
// name the registry (the file is not read); a wrong password set through
// them is what the registry is asked with, so it is refused naming the
// registry; a partial set is ignored.
func TestTheRegistryVariablesAreUsedInsteadOfTheFile(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	for _, tc := range []struct {
		name              string
		addr, user, pass  string
		wantAddr, wantErr string
	}{
		{"all three name the registry", reg.Addr, reg.Username, reg.Password, reg.Addr, ""},
		{"a wrong password in them is refused by the registry", reg.Addr, reg.Username, "not-the-password", "", "answers 401"},
		{"a partial set is ignored and the file read", "", reg.Username, "not-the-password", reg.Addr, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(RegistryEnvVariables[0], tc.addr)
			t.Setenv(RegistryEnvVariables[1], tc.user)
			t.Setenv(RegistryEnvVariables[2], tc.pass)
			got, err := findShipRegistry(t.Context())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), tc.pass) {
					t.Errorf("the error shows the password: %v", err)
				}
				return
			}
			if err != nil || got.addr != tc.wantAddr {
				t.Errorf("registry %q (%v), want %q", got.addr, err, tc.wantAddr)
			}
		})
	}
}
