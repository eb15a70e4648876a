package bench

import "github.com/nationtech/harmony-fleet/authcallout"

// floorUser is a static FLEET user that bypasses the callout: the raw
// floor's plain subscribers and publisher and the measurements' monitor
// connect with it. Devices never do.
const floorUser = "scalebench-floor"

// secrets are the benchmark's own generated secret: the floor user's
// password, in memory and in the children's environment only (the control
// plane generates and keeps the callout's).
type secrets struct {
	floorPassword string
}

// newSecrets generates a fresh floor password.
func newSecrets() *secrets { return &secrets{floorPassword: randomToken()} }

// staticUser is the floor user the control plane adds to the documented
// configuration.
func (s *secrets) staticUser() *authcallout.StaticUser {
	return &authcallout.StaticUser{Name: floorUser, Password: s.floorPassword, PasswordVar: "SCALEBENCH_FLOOR_PASSWORD",
		Comment: "scalebench only: the raw floor's plain clients and the measurements' monitor."}
}
