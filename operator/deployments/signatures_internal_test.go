package deployments

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func publicPEM(t *testing.T, curve elliptic.Curve) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// TestASignaturePolicyIsFrozenWithTheRevisionOnlyWhenSet: a Deployment
// without spec.signatures writes the revision bytes of before; one with it
// adds its keys, as given; one whose key is not ECDSA P-256 appends
// nothing and says which field to fix.
func TestASignaturePolicyIsFrozenWithTheRevisionOnlyWhenSet(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	old, next := publicPEM(t, elliptic.P256()), publicPEM(t, elliptic.P256())
	quoted := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	for _, tc := range []struct {
		name    string
		policy  *fleetv1.SignaturePolicy
		want    string
		wantErr string
	}{
		{"without a policy the bytes are those of before", nil, beforePlans, ""},
		{"a policy's keys are frozen in the revision, in order", &fleetv1.SignaturePolicy{Keys: []fleetv1.TrustedKey{{Name: "ci-2026", PublicKey: old}, {Name: "ci-2027", PublicKey: next}}},
			strings.TrimSuffix(beforePlans, "}") + `,"signatures":{"keys":[{"name":"ci-2026","publicKey":` + quoted(old) + `},{"name":"ci-2027","publicKey":` + quoted(next) + `}]}}`, ""},
		{"a key that is not ECDSA P-256 appends nothing and names the field", &fleetv1.SignaturePolicy{Keys: []fleetv1.TrustedKey{{Name: "ci", PublicKey: publicPEM(t, elliptic.P384())}}},
			"", "deployment lab/api: spec.signatures.keys[0].publicKey: not a PEM PUBLIC KEY block holding an ECDSA P-256 key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate})
			d.Spec.Signatures = tc.policy
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, _, err := RevisionEvents(d, res)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || len(evs) != 0 {
					t.Fatalf("RevisionEvents = %d events, %v; want none and an error starting %q", len(evs), err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(evs[len(evs)-1].Data)); len(evs) != 1 || diff != "" {
				t.Errorf("%d events; the revision's data (-want +got):\n%s", len(evs), diff)
			}
		})
	}
}
