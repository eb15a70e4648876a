package podmantest_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containers/podman/v5/pkg/errorhandling"

	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

func TestIsAuthFailure(t *testing.T) {
	// The first message is verbatim what Podman 4.3.1 streams back (inside an
	// HTTP 200) when the registry refuses an anonymous pull.
	refused := errors.New("initializing source docker://127.0.0.1:5000/smoke@sha256:ab55: reading manifest sha256:ab55 in 127.0.0.1:5000/smoke: unauthorized: authentication required")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"no error is not an auth failure", nil, false},
		{"an anonymous pull refused by the registry is", refused, true},
		{"a refusal wrapped by the caller still is", fmt.Errorf("pull image: %w", refused), true},
		{"wrong credentials are", errors.New("unable to retrieve auth token: invalid username/password: unauthorized: authentication required"), true},
		{"an HTTP 401 error model is", &errorhandling.ErrorModel{Message: "login failed", ResponseCode: 401}, true},
		{"a missing manifest is not", errors.New("reading manifest v9 in 127.0.0.1:5000/smoke: manifest unknown"), false},
		{"a missing image in local storage is not", &errorhandling.ErrorModel{Message: "no such image", ResponseCode: 404}, false},
		{"a refused connection is not", errors.New("pinging container registry 127.0.0.1:5001: dial tcp 127.0.0.1:5001: connect: connection refused"), false},
		{"an untrusted certificate is not", errors.New("x509: certificate signed by unknown authority"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podmantest.IsAuthFailure(tt.err); got != tt.want {
				t.Errorf("IsAuthFailure(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
