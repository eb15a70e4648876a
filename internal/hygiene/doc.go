// Package hygiene holds repository-wide tests: every package has a doc
// comment; the import rules of docs/architecture.md hold for the linked
// dependencies of each package and binary; and only the packages named
// there link the test harnesses (internal/testenv/..., internal/natstest,
// internal/natscluster, internal/callouttest, internal/poisontest,
// agent/runtime/runtimetest),
// fleet dev (dev and its stand-ins dev/baostandin and dev/kubelocal), the
// scale benchmark (bench), fleet token's diagnosis (identity/tokencheck) and
// the one-machine control plane's parts (controlplane,
// controlplane/natsembed, identity/devop, enroll), so no production binary
// links them; and internal/ holds no command and no code a binary links but
// the helpers. It has no code of its own; nothing imports it.
package hygiene
