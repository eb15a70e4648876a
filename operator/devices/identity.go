// The Device controller's identity job: the fleet-identity KV projection of
// Devices (registration, quarantine, conflicts between Devices).

package devices

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/kvstore"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
)

// finalize deletes the identity keys that name the Device (only when it is
// the device id's owner) and drops the finalizer.
func (r *Reconciler) finalize(ctx context.Context, d *fleetv1.Device, served bool) error {
	if !controllerutil.ContainsFinalizer(d, FinalizerDeviceIdentity) {
		return nil
	}
	if served {
		subjects := []string{d.Spec.IdentitySubject}
		if reg := d.Annotations[AnnotationRegisteredIdentity]; reg != "" && reg != d.Spec.IdentitySubject {
			subjects = append(subjects, reg)
		}
		for _, s := range subjects {
			if err := r.unregister(ctx, s, d.Name); err != nil {
				return err
			}
		}
		r.telemetry.forget(d.Name)
	}
	controllerutil.RemoveFinalizer(d, FinalizerDeviceIdentity)
	if err := r.Client.Update(ctx, d); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer of Device %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// identityKV returns the fleet-identity bucket.
func (r *Reconciler) identityKV(ctx context.Context) (jetstream.KeyValue, error) {
	r.kvMu.Lock()
	defer r.kvMu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	kv, err := r.Store.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketIdentity, err)
	}
	r.kv = kv
	return kv, nil
}

// identitySlot is an identity subject's fleet-identity key and what it
// holds.
type identitySlot struct {
	key string
	// entry is the key's entry; nil when the key holds nothing.
	entry jetstream.KeyValueEntry
}

// identitySnapshotTTL bounds how long the start's one-pass read of the
// bucket answers reads: each key once, within this time of the read.
const identitySnapshotTTL = 2 * time.Minute

// identitySnapshot is the fleet-identity bucket read in one pass when the
// Device controller starts (one watch, not one get per Device: the cold
// start at 100,000 Devices). Each key answers one read; later reads, and
// reads after identitySnapshotTTL, go to the bucket. An answer that went
// stale in between costs no correctness: every write is conditional on
// the key's revision (a lost race looks again).
type identitySnapshot struct {
	mu     sync.Mutex
	loaded bool
	at     time.Time
	// entries are the keys not read yet; absent the keys the bucket did
	// not hold (read, they are added to used).
	entries map[string]jetstream.KeyValueEntry
	used    map[string]bool
}

// take returns the snapshot's answer for key, once: ok is false when the
// snapshot has none (not loaded, expired, or already read).
func (s *identitySnapshot) take(key string, now time.Time) (jetstream.KeyValueEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.loaded || now.Sub(s.at) > identitySnapshotTTL || s.used[key] {
		return nil, false
	}
	s.used[key] = true
	e := s.entries[key]
	delete(s.entries, key)
	return e, true
}

// load reads every current entry of kv with one watch, once per Reconciler;
// a failed read leaves the snapshot empty (reads go to the bucket).
func (s *identitySnapshot) load(ctx context.Context, kv jetstream.KeyValue, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded {
		return nil
	}
	s.loaded, s.at = true, now
	s.entries, s.used = map[string]jetstream.KeyValueEntry{}, map[string]bool{}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read %s in one pass: %w", events.BucketIdentity, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			s.entries = map[string]jetstream.KeyValueEntry{}
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok || e == nil {
				return nil // every current entry was delivered
			}
			s.entries[e.Key()] = e
		}
	}
}

// readIdentity returns the slot of an identity subject: from the start's
// one-pass read of the bucket the first time a key is read, else from the
// bucket.
func (r *Reconciler) readIdentity(ctx context.Context, subject string) (identitySlot, error) {
	key, err := events.IdentityKey(subject)
	if err != nil {
		return identitySlot{}, err // CRD validation prevents this
	}
	kv, err := r.identityKV(ctx)
	if err != nil {
		return identitySlot{}, err
	}
	if err := r.idSnap.load(ctx, kv, r.Now()); err != nil {
		r.Log.WarnContext(ctx, "identity bucket not read in one pass; reading key by key", "error", err)
	}
	if e, ok := r.idSnap.take(key, r.Now()); ok {
		return identitySlot{key: key, entry: e}, nil
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return identitySlot{key: key}, nil
	}
	if err != nil {
		return identitySlot{}, fmt.Errorf("read %s/%s: %w", events.BucketIdentity, key, err)
	}
	return identitySlot{key: key, entry: e}, nil
}

// unregister deletes the identity key of subject if its value names device;
// a key of another device is left alone. Idempotent.
func (r *Reconciler) unregister(ctx context.Context, subject, device string) error {
	slot, err := r.readIdentity(ctx, subject)
	if err != nil || slot.entry == nil {
		return err
	}
	e, key := slot.entry, slot.key
	if v, err := events.DecodeIdentityEntry(e.Value()); err == nil && v.Device != device {
		return nil
	}
	kv, err := r.identityKV(ctx)
	if err != nil {
		return err
	}
	err = kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete %s/%s: %w", events.BucketIdentity, key, err)
	}
	r.Log.InfoContext(ctx, "identity unregistered", "device", device, "key", key)
	return nil
}

// identityOutcome is what syncIdentity decided.
type identityOutcome struct {
	// acted: syncIdentity changed the Device (its watch calls again) or lost
	// a race for the key; the reconcile ends here.
	acted bool
	// registered is the IdentityRegistered condition when !acted.
	registered metav1.Condition
	// retry > 0: look again after it (a lost race, or a key that belongs to
	// another device).
	retry time.Duration
}

// syncIdentity registers the Device's identity subject: it moves the
// registration annotation (deleting the old key first) or writes the
// fleet-identity value.
func (r *Reconciler) syncIdentity(ctx context.Context, d *fleetv1.Device) (identityOutcome, error) {
	acted := identityOutcome{acted: true}
	reg := d.Annotations[AnnotationRegisteredIdentity]
	if reg != d.Spec.IdentitySubject {
		if reg != "" {
			if err := r.unregister(ctx, reg, d.Name); err != nil {
				return identityOutcome{}, err
			}
		}
		orig := d.DeepCopy()
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[AnnotationRegisteredIdentity] = d.Spec.IdentitySubject
		if err := r.Client.Patch(ctx, d, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return identityOutcome{}, fmt.Errorf("record identity of Device %s/%s: %w", d.Namespace, d.Name, err)
		}
		return acted, nil
	}
	_, quarantined := d.Labels[fleetv1.LabelBlacklist]
	want, err := events.IdentityEntry{Device: d.Name, Quarantined: quarantined}.Encode()
	if err != nil {
		return identityOutcome{}, err // CRD validation prevents this: a Device's name is a device token
	}
	slot, err := r.readIdentity(ctx, d.Spec.IdentitySubject)
	if err != nil {
		return identityOutcome{}, err
	}
	e, key := slot.entry, slot.key
	kv, err := r.identityKV(ctx)
	if err != nil {
		return identityOutcome{}, err
	}
	registered := identityOutcome{registered: deviceCondition(d, fleetv1.ConditionIdentityRegistered, metav1.ConditionTrue,
		fleetv1.ReasonRegistered, fmt.Sprintf("the fleet-identity key %s names this device", key))}
	lostRace := identityOutcome{acted: true, retry: requeue.KVRaceRetry}
	switch {
	case e == nil:
		_, err := kv.Create(ctx, key, want)
		if kvstore.Conflict(err) {
			return lostRace, nil
		}
		if err != nil {
			return identityOutcome{}, fmt.Errorf("write %s/%s: %w", events.BucketIdentity, key, err)
		}
	case string(e.Value()) == string(want):
		return registered, nil
	default:
		if cur, err := events.DecodeIdentityEntry(e.Value()); err == nil && cur.Device != d.Name {
			r.Log.WarnContext(ctx, "identity subject already registered to another device; fix spec.identitySubject",
				"device", d.Name, "namespace", d.Namespace, "key", key, "registeredTo", cur.Device)
			return identityOutcome{
				registered: deviceCondition(d, fleetv1.ConditionIdentityRegistered, metav1.ConditionFalse, fleetv1.ReasonIdentityInUse,
					fmt.Sprintf("identity subject %s is registered to device %s: give this Device its own spec.identitySubject", key, cur.Device)),
				retry: requeue.IdentityConflictWait,
			}, nil
		}
		_, err := kv.Update(ctx, key, want, e.Revision())
		if kvstore.Conflict(err) {
			return lostRace, nil
		}
		if err != nil {
			return identityOutcome{}, fmt.Errorf("write %s/%s: %w", events.BucketIdentity, key, err)
		}
	}
	r.Log.InfoContext(ctx, "identity registered", "device", d.Name, "key", key, "quarantined", quarantined)
	return registered, nil
}
