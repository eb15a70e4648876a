package devop_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// TestMachineUsersAndKeysSurviveARestartWithAStateFile: a provider given a
// state file keeps its machine users, roles and public keys across a
// restart, so a key file it issued before still gets an id_token from the
// next provider on the same file (with a new signing key); a key removed
// before the restart stays refused; the file is mode 0600 and holds no
// private key.
func TestMachineUsersAndKeysSurviveARestartWithAStateFile(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "provider.json")
	first := start(t, devop.Options{StateFile: file})
	uid, err := first.CreateMachineUser(ctx, "device-pi-1", "fleet-device")
	if err != nil {
		t.Fatal(err)
	}
	kf, err := first.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := first.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := first.RemoveMachineKey(ctx, uid, gone.KeyID); err != nil {
		t.Fatal(err)
	}
	want, err := first.User(ctx, uid)
	if err != nil {
		t.Fatal(err)
	}

	second := start(t, devop.Options{StateFile: file})
	got, err := second.User(ctx, uid)
	if err != nil {
		t.Fatalf("the machine user is gone after the restart: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the machine user after the restart (-before +after):\n%s", diff)
	}
	if again, err := second.CreateMachineUser(ctx, "device-pi-1", "fleet-device"); err != nil || again != uid {
		t.Errorf("CreateMachineUser of the same name after the restart: %q, %v; want the same user %q", again, err, uid)
	}
	for _, tc := range []struct {
		name string
		key  credential.KeyFile
		ok   bool
	}{
		{"a key issued before the restart is granted", kf, true},
		{"a key removed before the restart is refused", gone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := credential.New(ctx, credential.Options{Issuer: second.Issuer(), Key: tc.key, Audience: second.Audience()})
			if err != nil {
				t.Fatal(err)
			}
			_, err = src.Token(ctx)
			if tc.ok && err != nil {
				t.Errorf("grant: %v", err)
			}
			if !tc.ok && !errors.Is(err, credential.ErrGrant) {
				t.Errorf("grant: %v, want credential.ErrGrant", err)
			}
		})
	}

	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("the state file has mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), strings.TrimSpace(kf.Key)) {
		t.Errorf("the state file holds a private key:\n%s", b)
	}
}

// TestABadStateFileIsRefusedNamingTheFileAndTheFix: a state file the
// provider cannot read stops New with an error naming the file and what
// to do, rather than starting with no users.
func TestABadStateFileIsRefusedNamingTheFileAndTheFix(t *testing.T) {
	for _, tc := range []struct{ name, content string }{
		{"a file that is not JSON", "not json"},
		{"another format version", `{"version": 99}`},
		{"a key that is not a PEM public key", `{"version": 1, "machineUsers": [{"id": "u1", "name": "n", "keys": [{"id": "k", "publicKey": "x"}]}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "provider.json")
			if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := devop.New(devop.Options{StateFile: file})
			if !errors.Is(err, devop.ErrBadState) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "delete it") {
				t.Errorf("New: %v; want devop.ErrBadState naming %s and the fix", err, file)
			}
		})
	}
}
