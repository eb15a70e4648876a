package dev_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/zitadel"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// idTokenOf is an id_token of the provider of ep for a key file's machine
// user.
func idTokenOf(ctx context.Context, t *testing.T, ep dev.Endpoints, key credential.KeyFile) string {
	t.Helper()
	src, err := credential.New(ctx, credential.Options{Issuer: ep.Issuer, Key: key, Audience: ep.Audience})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := src.IDToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestTheDevicesGroupRoleLogsInOnlyTheGroupsDevices runs fleet dev and
// logs in to the stand-in's role of the devices' group (OpenBaoRole)
// through the real OpenBao client: with a device's id_token it passes; with
// the id_token of another machine user of the same provider and audience
// (not a device of the group) the stand-in refuses it as OpenBao refuses a
// token its role's bound_claims do not match, as production binds a
// group's role to its devices.
func TestTheDevicesGroupRoleLogsInOnlyTheGroupsDevices(t *testing.T) {
	needKube(t)
	dir := t.TempDir()
	p := startDev(t, dir, "--devices", "1", "--runtime", "sim")
	defer p.stop(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ep, err := dev.ReadEndpoints(dir)
	if err != nil {
		t.Fatal(err)
	}
	device, err := credential.ReadKeyFile(filepath.Join(dir, "devices", dev.DeviceName(1)+".key.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Another machine user of the project: what a CI identity, the
	// operator or any other client of the provider holds.
	adminTok, err := os.ReadFile(ep.IDPTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	idp, err := zitadel.New(zitadel.Options{BaseURL: ep.Issuer, Token: strings.TrimSpace(string(adminTok))})
	if err != nil {
		t.Fatal(err)
	}
	uid, err := idp.CreateMachineUser(ctx, "not-a-device")
	if err != nil {
		t.Fatal(err)
	}
	other, err := idp.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	other.Issuer, other.Audience = ep.Issuer, ep.Audience

	for _, tc := range []struct {
		name string
		key  credential.KeyFile
		want string // the refusal's text; "" logs in
	}{
		{"a device of the group logs in", device, ""},
		{"another machine user of the provider is refused", other,
			`error validating claims: claim "sub" does not match any associated bound claim values`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := openbao.New(openbao.Config{Address: ep.OpenBaoAddr, Role: ep.OpenBaoRole})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Login(ctx, idTokenOf(ctx, t, ep, tc.key))
			got := ""
			if err != nil {
				if !errors.Is(err, openbao.ErrLogin) {
					t.Fatalf("login: %v, want openbao.ErrLogin or none", err)
				}
				_, got, _ = strings.Cut(err.Error(), ep.OpenBaoRole+`" at auth/jwt: `)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("login to %s (-want +got):\n%s", ep.OpenBaoRole, diff)
			}
		})
	}
}
