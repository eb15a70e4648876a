package imagesig

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"reflect"

	sigstoresig "github.com/sigstore/sigstore/pkg/signature"
	"go.podman.io/image/v5/signature/signer"
	"go.podman.io/image/v5/signature/sigstore"
)

// PayloadSigner signs sigstore payloads with a key held elsewhere (OpenBao
// transit): the private key never enters this process.
type PayloadSigner interface {
	// SignPayload returns the ASN.1 DER ECDSA P-256 signature of the
	// SHA-256 of payload.
	SignPayload(ctx context.Context, payload []byte) ([]byte, error)
}

// ErrSignerMismatch: the remote signer's signature does not verify under
// the public key it was said to sign with (another key, a rotation since
// its public keys were read, a broken server).
var ErrSignerMismatch = errors.New("the remote signature does not verify under the signing key's public key")

// ErrSignerUnsupported: this containers/image no longer lets a signer
// whose key is elsewhere make sigstore signatures (see remoteSigner).
var ErrSignerUnsupported = errors.New("containers/image cannot sign with a remote key")

// remoteSigner is a sigstore signature.Signer whose SignMessage asks a
// PayloadSigner, and checks its answer under the expected public key.
type remoteSigner struct {
	ctx    context.Context
	remote PayloadSigner
	pub    *ecdsa.PublicKey
}

// PublicKey implements sigstore's signature.PublicKeyProvider.
func (s *remoteSigner) PublicKey(...sigstoresig.PublicKeyOption) (crypto.PublicKey, error) {
	return s.pub, nil
}

// SignMessage implements sigstore's signature.Signer.
func (s *remoteSigner) SignMessage(message io.Reader, _ ...sigstoresig.SignOption) ([]byte, error) {
	payload, err := io.ReadAll(message)
	if err != nil {
		return nil, err
	}
	sig, err := s.remote.SignPayload(s.ctx, payload)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(payload)
	if !ecdsa.VerifyASN1(s.pub, sum[:], sig) {
		return nil, ErrSignerMismatch
	}
	return sig, nil
}

// parsePublicKey parses a PEM ECDSA P-256 public key.
func parsePublicKey(pemKey string) (*ecdsa.PublicKey, []byte, error) {
	block, _ := pem.Decode([]byte(pemKey))
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, nil, errors.New("imagesig: the signer's public key is not a PEM PUBLIC KEY block")
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("imagesig: the signer's public key: %w", err)
	}
	ec, ok := pub.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, nil, errors.New("imagesig: the signer's public key is not an ECDSA P-256 key")
	}
	return ec, pem.EncodeToMemory(block), nil
}

// newRemoteSigner is a containers/image signer that makes its sigstore
// signatures with remote: containers/image still builds the payload and
// writes the attachment, exactly as for a key file.
//
// containers/image v5 offers no exported way to sign with a key it cannot
// read: its Signer "can't be implemented externally", and the pieces a
// caller would assemble a signature from (SigstoreFromComponents,
// PutSignaturesWithFormat) take types of its internal packages. Its one
// extension point is sigstore.Option, a func(*internal.SigstoreSigner)
// error that the key-file option uses to set the struct's exported
// PrivateKey (a sigstore signature.Signer) and SigningKeyOrCert. We make
// such a function with reflect and set those two fields. If a later
// containers/image changes that struct, this fails with
// ErrSignerUnsupported (the real-registry tests catch it), never with a
// signature of another format.
func newRemoteSigner(ctx context.Context, remote PayloadSigner, publicKey string) (*signer.Signer, error) {
	pub, pubPEM, err := parsePublicKey(publicKey)
	if err != nil {
		return nil, err
	}
	rs := &remoteSigner{ctx: ctx, remote: remote, pub: pub}
	optType := reflect.TypeFor[sigstore.Option]()
	if optType.Kind() != reflect.Func || optType.NumIn() != 1 || optType.In(0).Kind() != reflect.Pointer || optType.In(0).Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("imagesig: %w: sigstore.Option is %s", ErrSignerUnsupported, optType)
	}
	st := optType.In(0).Elem()
	keyField, ok1 := st.FieldByName("PrivateKey")
	certField, ok2 := st.FieldByName("SigningKeyOrCert")
	if !ok1 || !ok2 || !keyField.IsExported() || !reflect.TypeOf(rs).AssignableTo(keyField.Type) || certField.Type != reflect.TypeFor[[]byte]() {
		return nil, fmt.Errorf("imagesig: %w: %s has no PrivateKey signature.Signer and SigningKeyOrCert []byte", ErrSignerUnsupported, st)
	}
	opt := reflect.MakeFunc(optType, func(args []reflect.Value) []reflect.Value {
		s := args[0].Elem()
		var res error
		if !s.FieldByIndex(keyField.Index).IsNil() {
			res = errors.New("multiple private key sources specified when preparing to create sigstore signatures")
		} else {
			s.FieldByIndex(keyField.Index).Set(reflect.ValueOf(rs))
			s.FieldByIndex(certField.Index).SetBytes(pubPEM)
		}
		out := reflect.New(reflect.TypeFor[error]()).Elem()
		if res != nil {
			out.Set(reflect.ValueOf(res))
		}
		return []reflect.Value{out}
	}).Interface().(sigstore.Option)
	sg, err := sigstore.NewSigner(opt)
	if err != nil {
		return nil, fmt.Errorf("imagesig: %w: %w", ErrSignerUnsupported, err)
	}
	return sg, nil
}
