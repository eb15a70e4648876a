package zitadel_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/identity/zitadel"
)

func start(t *testing.T) *devop.Provider {
	t.Helper()
	p, err := devop.New(devop.Options{AdminToken: "admin-pat"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func TestTheClientManagesMachineUsersAndKeys(t *testing.T) {
	ctx := context.Background()
	p := start(t)
	c, err := zitadel.New(zitadel.Options{BaseURL: p.Issuer(), Token: "admin-pat", ProjectID: p.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	uid, err := c.CreateMachineUser(ctx, "ci", "fleet-shipper")
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.CreateMachineUser(ctx, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if again != uid {
		t.Fatalf("creating an existing name returned %s, want %s", again, uid)
	}
	u, err := p.User(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"fleet-shipper"}, u.Roles); diff != "" {
		t.Fatalf("roles (-want +got):\n%s", diff)
	}
	kf, err := c.AddMachineKey(ctx, uid, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: kf})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Token(ctx); err != nil {
		t.Fatalf("the minted key cannot get a token: %v", err)
	}
	ids, err := c.ListMachineKeys(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []string{kf.KeyID}) {
		t.Fatalf("keys %v, want [%s]", ids, kf.KeyID)
	}
	if err := c.RemoveMachineKey(ctx, uid, kf.KeyID); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveMachineKey(ctx, uid, kf.KeyID); !errors.Is(err, zitadel.ErrNotFound) {
		t.Fatalf("removing a removed key: %v, want ErrNotFound", err)
	}
	src.Invalidate()
	if _, err := src.Token(ctx); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("grant with a removed key: %v, want ErrGrant", err)
	}
}

func TestTheManagementAPIRefusesAWrongToken(t *testing.T) {
	p := start(t)
	c, err := zitadel.New(zitadel.Options{BaseURL: p.Issuer(), Token: "guess"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateMachineUser(context.Background(), "x")
	var se *zitadel.StatusError
	if !errors.As(err, &se) || se.Status != 401 {
		t.Fatalf("error %v, want HTTP 401", err)
	}
	if strings.Contains(err.Error(), "guess") {
		t.Fatal("the error quotes the token")
	}
}
