package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	"github.com/nationtech/harmony-fleet/score"
)

// ImageVerifier checks an image's signatures in its registry against a
// revision's trust policy (ADR 0023); *imagesig.Verifier is the real one.
type ImageVerifier interface {
	// Verify returns nil when r.Digest is signed by one of r.Keys, an
	// *imagesig.Error when it is not (imagesig.ErrRegistryUnavailable in
	// its chain when the registry could not be reached). It calls
	// r.Credential only when it reads the registry, and returns its
	// error as it is.
	Verify(ctx context.Context, r imagesig.Request) error
}

// ErrNoVerifier: a revision has a signature policy but the Reconciler
// has no ImageVerifier to check it with.
var ErrNoVerifier = errors.New("the revision has a signature policy but this agent has no image verifier")

// verifyImages checks, for a revision with a signature policy, that every
// image of res (the init container's first) as the engine pulled it — its
// recorded digest, not what the registry's tag says now — is signed by
// one of the policy's keys, and pins each container of res to it
// (resolvedService.verified, repo@digest): the container is created from
// what was verified. Nothing else is changed either way. A refused image
// is a *PreflightError naming the container, the image, the digest, why
// and the keys tried; a registry that cannot be reached while the
// signatures are read is an *UnavailableError. Without a policy it does
// nothing.
func (r *Reconciler) verifyImages(ctx context.Context, e events.IntentEntry, res *resolved) error {
	if e.Signatures == nil {
		return nil
	}
	keys := make([]sigkeys.Key, len(e.Signatures.Keys))
	for i, k := range e.Signatures.Keys {
		keys[i] = sigkeys.Key{Name: k.Name, PublicKey: k.PublicKey}
	}
	if err := sigkeys.CheckKeys("signatures.keys", keys); err != nil {
		return &PreflightError{Reason: "the revision's signature policy is invalid: " + err.Error(), Err: err}
	}
	if r.Verifier == nil {
		return &PreflightError{Reason: ErrNoVerifier.Error(), Err: ErrNoVerifier}
	}
	type container struct {
		what string
		svc  *resolvedService
	}
	var all []container
	if res.init != nil {
		all = append(all, container{"init container " + res.init.Name, res.init})
	}
	for i := range res.services {
		all = append(all, container{"service " + res.services[i].Name, &res.services[i]})
	}
	verified := map[string]string{} // image → repo@digest
	for _, c := range all {
		if v, seen := verified[c.svc.Image]; seen {
			c.svc.verified = v
			continue
		}
		v, err := r.verifyImage(ctx, c.svc.Service, keys)
		if err != nil {
			var ue *UnavailableError
			if errors.As(err, &ue) {
				return err
			}
			return &PreflightError{Reason: c.what + ": " + err.Error(), Err: err}
		}
		verified[c.svc.Image], c.svc.verified = v, v
	}
	return nil
}

// verifyImage checks one image: its digest from the engine, then the
// registry's signatures, read with its pull credential when it has one —
// read only when the verifier must go to the registry, not for a check it
// remembers. It returns the image by the verified digest.
func (r *Reconciler) verifyImage(ctx context.Context, s score.Service, keys []sigkeys.Key) (string, error) {
	digest, err := r.rt().ImageDigest(ctx, s.Image)
	if err != nil {
		return "", fmt.Errorf("image %s: read the digest it was pulled with: %w", s.Image, err)
	}
	credential := func(ctx context.Context) (*imagesig.Auth, error) {
		auth, err := r.pullAuth(ctx, s)
		if auth == nil || err != nil {
			return nil, err
		}
		return &imagesig.Auth{Username: auth.Username, Password: auth.Password}, nil
	}
	err = r.Verifier.Verify(ctx, imagesig.Request{Image: s.Image, Digest: digest, Keys: keys, Credential: credential})
	if errors.Is(err, imagesig.ErrRegistryUnavailable) {
		return "", &UnavailableError{Component: ComponentRegistry, Err: err}
	}
	if err != nil {
		return "", err
	}
	r.log().InfoContext(ctx, "image signature verified", "image", s.Image, "digest", digest)
	return imagesig.PinnedReference(s.Image, digest)
}
