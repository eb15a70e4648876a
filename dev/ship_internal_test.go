package dev

import (
	"strings"
	"testing"
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
