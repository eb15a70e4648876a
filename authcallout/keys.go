package authcallout

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/nacl/box"
)

// signer signs with the issuer's ed25519 key derived once (nkeys derives it
// from the seed on every Sign, which costs as much as the signature).
type signer struct {
	priv ed25519.PrivateKey
	// key is the issuer key pair with its public key computed once: the
	// JWT encoder asks for it on every encode, and nkeys derives it from
	// the seed each time (a scalar multiplication, as costly as a
	// signature).
	key issuerKey
}

// issuerKey is a key pair whose PublicKey is the one computed at start.
type issuerKey struct {
	nkeys.KeyPair
	pub string
}

// PublicKey returns the public key computed once.
func (k issuerKey) PublicKey() (string, error) { return k.pub, nil }

func newSigner(kp nkeys.KeyPair) (*signer, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, errors.New("authcallout: Issuer has no seed: give the account key pair from its seed (SA...)")
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || len(raw) != ed25519.SeedSize {
		return nil, errors.New("authcallout: Issuer seed does not decode")
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, errors.New("authcallout: Issuer has no public key")
	}
	return &signer{priv: ed25519.NewKeyFromSeed(raw), key: issuerKey{KeyPair: kp, pub: pub}}, nil
}

func (s *signer) sign(_ string, data []byte) ([]byte, error) { return ed25519.Sign(s.priv, data), nil }

// xkeyVersion is the header of nkeys' sealed boxes (nkeys.XKeyVersionV1).
const xkeyVersion = "xkv1"

// maxPeers bounds the cache of shared keys (one per server xkey).
const maxPeers = 1024

// boxer opens and seals nkeys curve boxes with a shared key computed once
// per server xkey (the precomputation is the expensive part of a box).
type boxer struct {
	priv [32]byte
	mu   sync.Mutex // guards shared
	// shared maps a peer's public xkey to the precomputed shared key.
	shared map[string]*[32]byte
}

func newBoxer(kp nkeys.KeyPair) (*boxer, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, errors.New("authcallout: XKey has no seed: give the curve key pair from its seed (SX...)")
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || len(raw) != 32 {
		return nil, errors.New("authcallout: XKey seed does not decode")
	}
	b := &boxer{shared: map[string]*[32]byte{}}
	copy(b.priv[:], raw)
	return b, nil
}

func (b *boxer) key(peer string) (*[32]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k, ok := b.shared[peer]; ok {
		return k, nil
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteCurve, []byte(peer))
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("%w: server xkey is not a curve public key", ErrBadRequest)
	}
	var pub [32]byte
	copy(pub[:], raw)
	k := new([32]byte)
	box.Precompute(k, &pub, &b.priv)
	if len(b.shared) >= maxPeers {
		clear(b.shared)
	}
	b.shared[peer] = k
	return k, nil
}

func (b *boxer) open(in []byte, peer string) ([]byte, error) {
	if len(in) <= len(xkeyVersion)+24 || !bytes.HasPrefix(in, []byte(xkeyVersion)) {
		return nil, fmt.Errorf("%w: not a sealed box", ErrBadRequest)
	}
	k, err := b.key(peer)
	if err != nil {
		return nil, err
	}
	var nonce [24]byte
	copy(nonce[:], in[len(xkeyVersion):])
	out, ok := box.OpenAfterPrecomputation(nil, in[len(xkeyVersion)+24:], &nonce, k)
	if !ok {
		return nil, fmt.Errorf("%w: cannot decrypt", ErrBadRequest)
	}
	return out, nil
}

func (b *boxer) seal(in []byte, peer string) ([]byte, error) {
	k, err := b.key(peer)
	if err != nil {
		return nil, err
	}
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("authcallout: nonce: %w", err)
	}
	out := make([]byte, 0, len(xkeyVersion)+24+len(in)+box.Overhead)
	out = append(out, xkeyVersion...)
	out = append(out, nonce[:]...)
	return box.SealAfterPrecomputation(out, in, &nonce, k), nil
}
