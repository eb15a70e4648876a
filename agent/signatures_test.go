package agent_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/score"
)

// countingCreds counts the pull credential reads.
type countingCreds struct {
	creds
	reads int
}

func (c *countingCreds) PullCredential(ctx context.Context, ref string) ([]byte, error) {
	c.reads++
	return c.creds.PullCredential(ctx, ref)
}

// rememberingVerifier is the one step under test's neighbour: it has
// remembered the checks of the images in remembered, and reads the
// registry (so the credential) for any other.
type rememberingVerifier struct {
	remembered map[string]bool
	credential []*imagesig.Auth
}

func (v *rememberingVerifier) Verify(ctx context.Context, r imagesig.Request) error {
	if v.remembered[r.Image+"@"+r.Digest] {
		return nil
	}
	auth := r.Auth
	if auth == nil && r.Credential != nil {
		a, err := r.Credential(ctx)
		if err != nil {
			return err
		}
		auth = a
	}
	v.credential = append(v.credential, auth)
	v.remembered[r.Image+"@"+r.Digest] = true
	return nil
}

func TestAPassWhoseChecksAreRememberedReadsNoPullCredentialForSignatures(t *testing.T) {
	const api = "reg.example:5000/team/api@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	const worker = "reg.example:5000/team/worker@sha256:2222222222222222222222222222222222222222222222222222222222222222"
	pull := `{"registry":"reg.example:5000","username":"device-pull","password":"pull-secret-1"}`
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{
		{Name: "api", Image: api, ImagePullSecret: "hub"}, {Name: "worker", Image: worker, ImagePullSecret: "hub"},
	}}}
	policy := &events.SignaturePolicy{Keys: []events.SignatureKey{{Name: "ci", PublicKey: testPublicKey(t)}}}
	tests := []struct {
		name       string
		remembered []string
		wantReads  int
	}{
		{"when every image's check is remembered no credential is read", []string{api, worker}, 0},
		{"when one image's check is not remembered the credential is read for it only", []string{api}, 1},
		{"when no check is remembered the credential is read for each image", nil, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, func(o *sim.Options) { o.LocalImages = append(o.LocalImages, api, worker) })
			cc := &countingCreds{creds: creds{"hub": pull}}
			v := &rememberingVerifier{remembered: map[string]bool{}}
			for _, img := range tt.remembered {
				v.remembered[img+"@"+img[len(img)-71:]] = true
			}
			w.r.Credentials, w.r.Verifier = cc, v
			e := entry(t, 1, s)
			e.Signatures = policy
			if err := w.r.Apply(w.ctx, e); err != nil {
				t.Fatal(err)
			}
			if cc.reads != tt.wantReads {
				t.Errorf("the pass read the pull credential %d times, want %d", cc.reads, tt.wantReads)
			}
			for _, a := range v.credential {
				if diff := cmp.Diff(&imagesig.Auth{Username: "device-pull", Password: "pull-secret-1"}, a); diff != "" {
					t.Errorf("the registry was read with (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// testPublicKey is a valid trust policy key.
func testPublicKey(t *testing.T) string {
	t.Helper()
	_, pub, err := imagesig.GenerateSigningKey([]byte("p"))
	if err != nil {
		t.Fatal(err)
	}
	return string(pub)
}
