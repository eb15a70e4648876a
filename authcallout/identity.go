package authcallout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
)

// IdentityEntry is the value of a fleet-identity KV entry, keyed by
// events.IdentityKey(identity subject). The operator writes it from Device
// CRs (spec.identitySubject → metadata.name, blacklist label → Quarantined);
// the callout only reads it. JSON: {"device":"<id>","quarantined":false}.
type IdentityEntry struct {
	// Device is the device id (the Device CR's name).
	Device string `json:"device"`
	// Quarantined is true while the Device carries the blacklist label.
	Quarantined bool `json:"quarantined"`
}

// Identities maps an OIDC subject to its fleet-identity entry. Lookup
// returns an error wrapping ErrUnknownIdentity when there is none.
type Identities interface {
	Lookup(ctx context.Context, subject string) (IdentityEntry, error)
}

// KVIdentities reads the fleet-identity bucket. Each lookup is one
// subject-scoped direct get, so a change (quarantine) applies to the next
// connect. The bucket is opened on first use: the callout may start before
// the operator provisions it (until then every device is unknown).
type KVIdentities struct {
	js jetstream.JetStream
	mu sync.Mutex // guards kv
	kv jetstream.KeyValue
}

// NewKVIdentities reads fleet-identity through js.
func NewKVIdentities(js jetstream.JetStream) *KVIdentities { return &KVIdentities{js: js} }

func (k *KVIdentities) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kv != nil {
		return k.kv, nil
	}
	kv, err := k.js.KeyValue(ctx, events.BucketIdentity)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: bucket %s is not provisioned", ErrUnknownIdentity, events.BucketIdentity)
	}
	if err != nil {
		return nil, fmt.Errorf("authcallout: open %s: %w", events.BucketIdentity, err)
	}
	k.kv = kv
	return kv, nil
}

// Lookup implements Identities.
func (k *KVIdentities) Lookup(ctx context.Context, subject string) (IdentityEntry, error) {
	key, err := events.IdentityKey(subject)
	if err != nil {
		return IdentityEntry{}, fmt.Errorf("%w: subject is not a valid identity key: %w", ErrUnknownIdentity, err)
	}
	kv, err := k.bucket(ctx)
	if err != nil {
		return IdentityEntry{}, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return IdentityEntry{}, fmt.Errorf("%w: %s", ErrUnknownIdentity, subject)
	}
	if err != nil {
		return IdentityEntry{}, fmt.Errorf("authcallout: read %s/%s: %w", events.BucketIdentity, key, err)
	}
	return DecodeIdentityEntry(e.Value())
}

// DecodeIdentityEntry parses a fleet-identity value and checks the device id.
func DecodeIdentityEntry(b []byte) (IdentityEntry, error) {
	var v IdentityEntry
	if err := json.Unmarshal(b, &v); err != nil {
		return IdentityEntry{}, fmt.Errorf("%w: fleet-identity value is not JSON: %w", ErrUnknownIdentity, err)
	}
	if err := events.ValidateToken(events.TokenDevice, v.Device); err != nil {
		return IdentityEntry{}, fmt.Errorf("%w: fleet-identity value: %w", ErrUnknownIdentity, err)
	}
	return v, nil
}

// Encode is the JSON the operator writes.
func (e IdentityEntry) Encode() ([]byte, error) { return json.Marshal(e) }
