// Package deploy holds the control plane's Kubernetes manifests as a
// kustomize base (base/) with overlays (overlays/production: NATS as a
// three-node JetStream cluster, two callout and two operator replicas, the
// dashboard behind an Ingress and the reference PostgreSQL, Zitadel and
// OpenBao of external/; overlays/single-node: one NATS node), the optional
// components that close the spec's production gaps (components/group-source,
// components/openbao-admin), the Prometheus rules (prometheus/) and the
// device units (systemd/). It has no Go API: its tests render every overlay
// with kubectl's kustomize and check the objects, load the rendered NATS
// configuration with nats-server, apply the composition to a real
// kube-apiserver, check the service accounts' access by impersonation
// against docs/operations.md, and run the images `task images` builds under
// Podman. Nothing imports it.
package deploy
