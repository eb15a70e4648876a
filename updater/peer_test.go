package updater_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
