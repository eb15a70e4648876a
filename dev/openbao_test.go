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
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/zitadel"
	"github.com/nationtech/harmony-fleet/operator"
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
// group's role to its devices. Every other group role fleet dev creates
// (the example group's, fleet-group-lab-example-edge, whose policies grant
// the example's secrets) refuses them all, the device's included: no dev
// device logs in with it; and the CI identity (when fleet dev made one) is
// refused by every group role.
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

	// The group roles fleet dev created, as the operator's policy sync
	// names them.
	rootTok, err := os.ReadFile(ep.OpenBaoTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := openbao.NewWithToken(openbao.Config{Address: ep.OpenBaoAddr}, strings.TrimSpace(string(rootTok)))
	if err != nil {
		t.Fatal(err)
	}
	roles, err := admin.JWTRoles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	groupPrefix := strings.ReplaceAll(operator.DefaultGroupRolePrefix, "{namespace}", ep.Namespace)
	var groupRoles []string
	for _, r := range roles {
		if strings.HasPrefix(r, groupPrefix) {
			groupRoles = append(groupRoles, r)
		}
	}
	if want := []string{ep.OpenBaoRole, groupPrefix + dev.ExampleGroup}; !cmp.Equal(want, groupRoles, cmpopts.SortSlices(func(a, b string) bool { return a < b })) {
		t.Fatalf("group roles of the stand-in: %q, want %q", groupRoles, want)
	}
	keys := []struct {
		who string
		key credential.KeyFile
	}{{"a device of the group", device}, {"another machine user of the provider", other}}
	if ci, err := credential.ReadKeyFile(filepath.Join(dir, "secrets", dev.ShipKeyFileName)); err == nil {
		keys = append(keys, struct {
			who string
			key credential.KeyFile
		}{"the CI identity", ci})
	} else {
		t.Logf("no CI identity (fleet dev found no registry): %v", err)
	}
	const refused = `error validating claims: claim "sub" does not match any associated bound claim values`
	for _, role := range groupRoles {
		for _, k := range keys {
			want := refused // the refusal's text; "" logs in
			if role == ep.OpenBaoRole && k.who == "a device of the group" {
				want = ""
			}
			t.Run(role+"/"+k.who, func(t *testing.T) {
				c, err := openbao.New(openbao.Config{Address: ep.OpenBaoAddr, Role: role})
				if err != nil {
					t.Fatal(err)
				}
				err = c.Login(ctx, idTokenOf(ctx, t, ep, k.key))
				got := ""
				if err != nil {
					if !errors.Is(err, openbao.ErrLogin) {
						t.Fatalf("login: %v, want openbao.ErrLogin or none", err)
					}
					_, got, _ = strings.Cut(err.Error(), role+`" at auth/jwt: `)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("login to %s (-want +got):\n%s", role, diff)
				}
			})
		}
	}
}
