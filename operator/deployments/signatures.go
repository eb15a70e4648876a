package deployments

import (
	"fmt"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// frozenSignatures is the revision's copy of the Deployment's image trust
// policy (spec.signatures, ADR 0023): nil when it sets none, so that the
// revision's bytes are as before. A policy whose keys do not check
// (sigkeys.CheckKeys: what the CRD's schema cannot see, such as a key that
// is not ECDSA P-256) is an error naming the field and the fix, and no
// revision is appended.
func frozenSignatures(d *fleetv1.Deployment) (*events.SignaturePolicy, error) {
	sp := d.Spec.Signatures
	if sp == nil {
		return nil, nil
	}
	keys := make([]sigkeys.Key, len(sp.Keys))
	out := &events.SignaturePolicy{Keys: make([]events.SignatureKey, len(sp.Keys))}
	for i, k := range sp.Keys {
		keys[i] = sigkeys.Key{Name: k.Name, PublicKey: k.PublicKey}
		out.Keys[i] = events.SignatureKey{Name: k.Name, PublicKey: k.PublicKey}
	}
	if err := sigkeys.CheckKeys("spec.signatures.keys", keys); err != nil {
		return nil, fmt.Errorf("deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return out, nil
}
