package operator

import "github.com/nationtech/harmony-fleet/operator/policysync"

// The pull-secret policy sync lives in package policysync; these names keep
// the root's API for the callers that configure it (cmd/fleet-operator,
// fleet dev, tests).
type (
	// PolicyAdmin is what the policy sync needs of OpenBao (policysync.Admin).
	PolicyAdmin = policysync.Admin
	// PolicyNames are the OpenBao paths and role names of the policy sync
	// (policysync.Names).
	PolicyNames = policysync.Names
)

// Defaults of the policy sync (package policysync).
const (
	DefaultDevicePrefix    = policysync.DefaultDevicePrefix
	DefaultGroupRolePrefix = policysync.DefaultGroupRolePrefix
	DefaultDeviceRole      = policysync.DefaultDeviceRole
	// PolicyPrefix starts the name of every policy the operator manages.
	PolicyPrefix = policysync.PolicyPrefix
	// FieldOwnerPolicies is the field manager of the PullSecretPolicy
	// condition.
	FieldOwnerPolicies = policysync.FieldOwnerPolicies
)

// PolicyName is the OpenBao policy of a Deployment (policysync.PolicyName).
func PolicyName(namespace, name string) string { return policysync.PolicyName(namespace, name) }
