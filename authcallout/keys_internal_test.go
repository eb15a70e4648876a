package authcallout

import (
	"bytes"
	"errors"
	"testing"

	"github.com/nats-io/nkeys"
)

// TestTheBoxesAreNkeysBoxes: the callout's boxes with a precomputed shared
// key are nkeys' sealed boxes byte for byte in layout: nkeys opens what the
// callout seals, the callout opens what nkeys seals (as nats-server does),
// and a box tampered with, sealed to another key or not a box is refused.
func TestTheBoxesAreNkeysBoxes(t *testing.T) {
	ours, _ := nkeys.CreateCurveKeys()
	oursPub, _ := ours.PublicKey()
	server, _ := nkeys.CreateCurveKeys()
	serverPub, _ := server.PublicKey()
	other, _ := nkeys.CreateCurveKeys()
	b, err := newBoxer(ours)
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("eyJ0eXAiOiJKV1QifQ.payload.signature")

	for range 2 { // the second round uses the cached shared key
		sealed, err := b.seal(msg, serverPub)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(sealed, []byte(nkeys.XKeyVersionV1)) {
			t.Fatalf("sealed box does not start with %q", nkeys.XKeyVersionV1)
		}
		opened, err := server.Open(sealed, oursPub)
		if err != nil {
			t.Fatalf("nkeys does not open the callout's box: %v", err)
		}
		if !bytes.Equal(opened, msg) {
			t.Fatalf("nkeys opened %q, want %q", opened, msg)
		}

		fromServer, err := server.Seal(msg, oursPub)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.open(fromServer, serverPub)
		if err != nil {
			t.Fatalf("the callout does not open nkeys' box: %v", err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("the callout opened %q, want %q", got, msg)
		}
	}

	fromServer, _ := server.Seal(msg, oursPub)
	tampered := bytes.Clone(fromServer)
	tampered[len(tampered)-1] ^= 1
	otherPub, _ := other.PublicKey()
	toOther, _ := server.Seal(msg, otherPub)
	for _, tc := range []struct {
		name string
		in   []byte
		peer string
	}{
		{"a tampered box is refused", tampered, serverPub},
		{"a box sealed to another key is refused", toOther, serverPub},
		{"a box opened with the wrong sender key is refused", fromServer, otherPub},
		{"a payload without the version header is refused", fromServer[len(nkeys.XKeyVersionV1):], serverPub},
		{"a too short payload is refused", []byte(nkeys.XKeyVersionV1 + "short"), serverPub},
		{"a sender key that is not a curve key is refused", fromServer, "UABC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := b.open(tc.in, tc.peer); !errors.Is(err, ErrBadRequest) {
				t.Fatalf("open: %v, want ErrBadRequest", err)
			}
		})
	}
	if _, err := b.seal(msg, "UABC"); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("seal to a key that is not a curve key: %v, want ErrBadRequest", err)
	}
}
