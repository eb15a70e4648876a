package devicelogs

import (
	"context"
	"errors"
	"fmt"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Authorizer decides whether a request may read a device's logs: nil
// when it may, an error wrapping ErrDenied (saying why) when it may not,
// any other error when it could not decide (the request is refused too).
type Authorizer interface {
	Authorize(ctx context.Context, r Request) error
}

// AuthorizerFunc adapts a function to Authorizer.
type AuthorizerFunc func(ctx context.Context, r Request) error

// Authorize calls f.
func (f AuthorizerFunc) Authorize(ctx context.Context, r Request) error { return f(ctx, r) }

// The permission reading logs is (ADR 0025): verb get on the subresource
// log of devices in group fleet.nationtech.io.
const (
	PermissionGroup       = "fleet.nationtech.io"
	PermissionResource    = "devices"
	PermissionSubresource = "log"
	PermissionVerb        = "get"
)

// KubeAccess asks the Kubernetes API server, as the user of Client's
// credentials, who they are (SelfSubjectReview) and whether they may read
// a device's logs (SelfSubjectAccessReview).
type KubeAccess struct {
	Client client.Client
}

// User is the user name the API server knows the credentials by.
func (k KubeAccess) User(ctx context.Context) (string, error) {
	review := &authnv1.SelfSubjectReview{}
	if err := k.Client.Create(ctx, review); err != nil {
		return "", fmt.Errorf("learn your user name (SelfSubjectReview): %w", err)
	}
	if review.Status.UserInfo.Username == "" {
		return "", errors.New("the API server names no user for these credentials: use a kubeconfig of a user")
	}
	return review.Status.UserInfo.Username, nil
}

// Authorize asks whether the credentials' user may get devices/log of
// r's Device.
func (k KubeAccess) Authorize(ctx context.Context, r Request) error {
	review := &authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authzv1.ResourceAttributes{Namespace: r.Namespace, Verb: PermissionVerb, Group: PermissionGroup,
			Resource: PermissionResource, Subresource: PermissionSubresource, Name: r.Device},
	}}
	if err := k.Client.Create(ctx, review); err != nil {
		return fmt.Errorf("ask the API server (SelfSubjectAccessReview): %w", err)
	}
	if !review.Status.Allowed {
		why := review.Status.Reason
		if why == "" {
			why = "no RBAC rule allows it"
		}
		return fmt.Errorf("%w: %s may not %s %s/%s of %s %s/%s (%s): grant the verb with a Role, see docs/fleet.md",
			ErrDenied, r.Who.User, PermissionVerb, PermissionResource, PermissionSubresource, PermissionGroup, r.Namespace, r.Device, why)
	}
	return nil
}
