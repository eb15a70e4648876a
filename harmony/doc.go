// Package harmony is the SDK an application's deployment program is written
// with. The program declares its stable build and deployment policy as a
// HarmonyApp (image builds, compiled contexts, one Fleet Deployment with its
// placement and services) and calls Main; the binary, named harmony, is the
// CI shipper:
//
//	harmony ship   --context C --tag T [--wait] [--wait-timeout D]
//	harmony deploy --context C --tag T --image name=ref … [--wait]
//
// ship builds every image with buildah, pushes it to the context's registry
// with credentials read from OpenBao into a temporary registry configuration
// directory, records the registry's digests, server-side applies one
// namespaced Fleet Deployment pinned to those digests (field manager
// harmony) and, with --wait, follows the status of exactly the (UID,
// generation) the apply returned. deploy skips build and push and accepts
// only digests and explicit dev-* tags.
//
// Invariants: the only credential read from the environment is
// HARMONY_ZITADEL_KEY_JSON; everything else comes from OpenBao after a JWT
// login with the id_token the key yields. No credential is printed, logged,
// put in an error or a Deployment, or written outside a temporary directory
// that is removed before the command returns. Identical inputs give an
// identical apply, so re-running an unchanged commit makes no new
// generation. There is no rollback command: the pipeline rolls forward.
//
// Application deployment programs import this package; its internals are in
// harmony/internal/… . It links Kubernetes client code and never the
// operator, the agent, the auth callout, events, projections, the
// module's top-level internal/ packages, the Podman bindings or
// controller-runtime (internal/hygiene checks).
package harmony
