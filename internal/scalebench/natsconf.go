package scalebench

import (
	"fmt"

	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// floorUser is a static FLEET user that bypasses the callout: the raw
// floor's plain subscribers and publisher connect with it. Devices never do.
const floorUser = "scalebench-floor"

// secrets are the run's generated passwords and keys; they live only in
// memory and in the children's environment.
type secrets struct {
	calloutPassword, readerPassword, sysPassword, floorPassword string
	issuer, xkey                                                nkeys.KeyPair
}

// newSecrets generates fresh passwords and keys.
func newSecrets() (*secrets, error) {
	s := &secrets{calloutPassword: randomToken(), readerPassword: randomToken(), sysPassword: randomToken(), floorPassword: randomToken()}
	var err error
	if s.issuer, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("scalebench: issuer key: %w", err)
	}
	if s.xkey, err = nkeys.CreateCurveKeys(); err != nil {
		return nil, fmt.Errorf("scalebench: xkey: %w", err)
	}
	return s, nil
}

// serverConfig is the documented configuration plus the floor user, with
// the documented $FLEET_... variables defined in front of it.
func serverConfig(s *secrets) (string, error) {
	issuer, err := s.issuer.PublicKey()
	if err != nil {
		return "", fmt.Errorf("scalebench: issuer key: %w", err)
	}
	xkey, err := s.xkey.PublicKey()
	if err != nil {
		return "", fmt.Errorf("scalebench: xkey: %w", err)
	}
	return authcallout.ServerConfigWith(authcallout.ConfigVars{CalloutPassword: s.calloutPassword, ReaderPassword: s.readerPassword,
		SysPassword: s.sysPassword, Issuer: issuer, XKey: xkey},
		&authcallout.StaticUser{Name: floorUser, Password: s.floorPassword, PasswordVar: "SCALEBENCH_FLOOR_PASSWORD",
			Comment: "scalebench only: the raw floor's plain clients."})
}
