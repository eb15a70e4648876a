package authcallout

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
)

// Identities maps an OIDC subject to its fleet-identity entry (the value
// format is events.IdentityEntry; the operator writes it, the callout only
// reads it). Lookup returns an error wrapping ErrUnknownIdentity when there
// is none.
type Identities interface {
	Lookup(ctx context.Context, subject string) (events.IdentityEntry, error)
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
func (k *KVIdentities) Lookup(ctx context.Context, subject string) (events.IdentityEntry, error) {
	key, err := events.IdentityKey(subject)
	if err != nil {
		return events.IdentityEntry{}, fmt.Errorf("%w: subject is not a valid identity key: %w", ErrUnknownIdentity, err)
	}
	kv, err := k.bucket(ctx)
	if err != nil {
		return events.IdentityEntry{}, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return events.IdentityEntry{}, fmt.Errorf("%w: %s", ErrUnknownIdentity, subject)
	}
	if err != nil {
		return events.IdentityEntry{}, fmt.Errorf("authcallout: read %s/%s: %w", events.BucketIdentity, key, err)
	}
	return decodeIdentity(e.Value())
}

// decodeIdentity decodes a fleet-identity value with
// events.DecodeIdentityEntry; a value that does not decode is an unknown
// identity.
func decodeIdentity(b []byte) (events.IdentityEntry, error) {
	v, err := events.DecodeIdentityEntry(b)
	if err != nil {
		return events.IdentityEntry{}, fmt.Errorf("%w: %w", ErrUnknownIdentity, err)
	}
	return v, nil
}
