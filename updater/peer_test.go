package updater_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/updater"
)

// nobody is the uid and gid the refused client runs as.
const nobody = 65534

// TestAClientOfAnotherUIDInTheSocketsGroupIsRefused runs the real client
// in a child process as another user (uid and gid 65534) whose group owns
// the socket: the file mode lets it connect, and the updater's peer check
// (SO_PEERCRED) refuses it.
func TestAClientOfAnotherUIDInTheSocketsGroupIsRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs the client as another user: run the tests as root (the test environment does)")
	}
	bin := buildBinary(t, "cmd/fleet-updater", "test")
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir), filepath.Dir(bin), filepath.Dir(filepath.Dir(bin))} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "updater.sock")
	o := updater.Options{Socket: sock, AllowedUID: 0, Apt: newFakeApt(t).apt()}
	startUpdaterWithGroup(t, o, nobody)

	cmd := exec.Command(bin, "client", "--socket", sock, "--op", "system-upgrade", "--id", "t1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.Output()
	if err == nil {
		t.Fatalf("the client as uid %d succeeded:\n%s", nobody, out)
	}
	var r updater.Response
	if jerr := json.Unmarshal(out, &r); jerr != nil || r.Code != updater.CodeRefused || !strings.Contains(r.Error, "uid 65534") {
		t.Fatalf("response %s (%v), want code refused naming uid %d", out, jerr, nobody)
	}
}

// TestARefusedPeerCannotDelayTheAllowedOne runs a peer of another uid in
// the socket's group (uid and gid 65534, a child process) that opens 16
// connections, as many as the updater serves at once, and keeps them open.
// The allowed peer's next request is answered, at the first try, and every
// one of the refused peer's connections gets the refusal and is closed by
// the updater.
func TestARefusedPeerCannotDelayTheAllowedOne(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test runs a peer as another user: run the tests as root (the test environment does)")
	}
	const conns = 16
	tests := []struct {
		name string
		mode string
	}{
		{"connections that send nothing", "idle"},
		{"connections that send a request and keep their end open", "request"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range []string{dir, filepath.Dir(dir)} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			sock := filepath.Join(dir, "updater.sock")
			c, _ := startUpdaterWithGroup(t, updater.Options{Socket: sock, AllowedUID: 0, Apt: newFakeApt(t).apt()}, nobody)
			peer := startHostilePeer(t, tc.mode, sock, conns)

			if err := c.Hello(context.Background(), "1.0.0"); err != nil {
				t.Fatalf("the allowed peer's hello, with %d connections of uid %d open: %v", conns, nobody, err)
			}

			type summary struct {
				Code    string
				NamesID bool
				Closed  bool
			}
			var got, want []summary
			for _, a := range peer.answers(t, conns) {
				var r updater.Response
				_ = json.Unmarshal([]byte(a.Answer), &r)
				got = append(got, summary{Code: r.Code, NamesID: strings.Contains(r.Error, "uid 65534"), Closed: a.Closed})
				want = append(want, summary{Code: updater.CodeRefused, NamesID: true, Closed: true})
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("what the refused peer's connections got (-want +got):\n%s", d)
			}
		})
	}
}
