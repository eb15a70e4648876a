package harmony

import (
	"net/http"
	"time"

	"github.com/nationtech/harmony-fleet/harmony/internal/cisecret"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// openBaoStore is the OpenBao client of a context, not yet logged in. It
// reads nothing from the environment (no BAO_ADDR, no VAULT_TOKEN).
func openBaoStore(b OpenBao) (cisecret.Store, error) {
	return openbao.New(openbao.Config{Address: b.URL, Role: b.Role, JWTMount: b.JWTMount, KVMount: b.KVMount,
		HTTPClient: &http.Client{Timeout: 30 * time.Second}})
}
