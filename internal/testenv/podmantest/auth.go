package podmantest

import (
	"errors"
	"net/http"
	"strings"

	"github.com/containers/podman/v5/pkg/errorhandling"
)

// authMarkers are the phrases a registry authentication failure leaves in
// the error text. A pull refused by the registry reaches the client inside
// an HTTP 200 response whose streamed body carries an error such as
// "reading manifest ...: unauthorized: authentication required", so the
// status code alone cannot tell; the text is all there is.
var authMarkers = []string{
	"unauthorized",
	"authentication required",
	"invalid username/password",
}

// IsAuthFailure reports whether err, returned by a Podman bindings call such
// as images.Pull, means the registry refused the credentials (none, or
// wrong ones), as opposed to a missing image, a network failure or a server
// error. It accepts wrapped errors and nil (false).
func IsAuthFailure(err error) bool {
	if err == nil {
		return false
	}
	var model *errorhandling.ErrorModel
	if errors.As(err, &model) && model.ResponseCode == http.StatusUnauthorized {
		return true
	}
	msg := strings.ToLower(err.Error())
	for _, m := range authMarkers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}
