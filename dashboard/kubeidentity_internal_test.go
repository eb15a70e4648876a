package dashboard

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
)

func TestTheKubernetesIdentityIsTheOneTheAPIServerGivesTheSameToken(t *testing.T) {
	const issuer = "https://id.example.com"
	token := func(sub, user, email string, verified bool, roles ...string) *oidc.IDTokenClaims {
		c := &oidc.IDTokenClaims{Claims: map[string]any{}}
		c.Subject, c.PreferredUsername, c.Email, c.EmailVerified = sub, user, email, oidc.Bool(verified)
		rs := map[string]any{}
		for _, r := range roles {
			rs[r] = map[string]any{"org": "example"}
		}
		c.Claims[RolesClaim] = rs
		c.Claims["sub"], c.Claims["preferred_username"], c.Claims["groupname"] = sub, user, "team-a"
		return c
	}
	tests := []struct {
		name  string
		kube  KubeIdentity
		token *oidc.IDTokenClaims
		want  User
	}{
		{"by default the subject after the issuer and #, as the API server's defaults", KubeIdentity{},
			token("2961", "ada", "", false, RoleAdmin),
			User{Subject: "2961", Name: "ada", Admin: true, KubeUser: issuer + "#2961", KubeGroups: []string{RoleAdmin}}},
		{"preferred_username with the prefix oidc:", KubeIdentity{UsernameClaim: "preferred_username", UsernamePrefix: "oidc:"},
			token("2961", "vera", "", false, RoleViewer),
			User{Subject: "2961", Name: "vera", Viewer: true, KubeUser: "oidc:vera", KubeGroups: []string{RoleViewer}}},
		{"a verified email without a prefix, groups with theirs", KubeIdentity{UsernameClaim: "email", GroupsPrefix: "oidc:"},
			token("2961", "ada", "ada@example.com", true, RoleAdmin, RoleViewer),
			User{Subject: "2961", Name: "ada", Admin: true, Viewer: true, KubeUser: "ada@example.com", KubeGroups: []string{"oidc:fleet-admin", "oidc:fleet-viewer"}}},
		{"an unverified email is no name, as the API server refuses it", KubeIdentity{UsernameClaim: "email"},
			token("2961", "ada", "ada@example.com", false, RoleAdmin), User{Subject: "2961", Name: "ada", Admin: true}},
		{"a name the API server reserves is never impersonated", KubeIdentity{UsernameClaim: "preferred_username", UsernamePrefix: "-"},
			token("2961", "system:kube-controller-manager", "", false, RoleAdmin),
			User{Subject: "2961", Name: "system:kube-controller-manager", Admin: true}},
		{"any other claim of the token", KubeIdentity{UsernameClaim: "groupname", UsernamePrefix: "-"},
			token("2961", "ada", "", false), User{Subject: "2961", Name: "ada", KubeUser: "team-a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, userOf(tc.token, tc.kube, issuer)); diff != "" {
				t.Errorf("user (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAKubernetesPrefixOfTheAPIServersOwnIsRefusedNamingTheField(t *testing.T) {
	o := Options{PublicURL: "https://fleet.example.com", SessionKey: make([]byte, SessionKeySize), OIDC: &OIDC{Issuer: "https://id.example.com", ClientID: "x"},
		Kube: KubeIdentity{UsernamePrefix: "system:"}}
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), `prefixes must not start with "system:"`) {
		t.Errorf("Validate: %v, want the prefix refused", err)
	}
}
