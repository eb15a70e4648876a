package harmony

import (
	"errors"

	"github.com/nationtech/harmony-fleet/harmony/internal/cisecret"
)

// openBaoStore makes the OpenBao client of a context.
func openBaoStore(OpenBao) (cisecret.Store, error) {
	return nil, errors.New("the OpenBao client is not wired yet")
}
