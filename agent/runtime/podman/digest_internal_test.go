package podman

import "testing"

func TestRepoDigestPicksTheDigestAReferenceWasPulledWith(t *testing.T) {
	const (
		d1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
		d2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
	)
	tests := []struct {
		name        string
		ref, own    string
		repoDigests []string
		want        string
	}{
		{"a reference by digest pulled from its repository has that digest", "reg.example/app@" + d1, d1, []string{"reg.example/app@" + d1}, d1},
		{"a reference by digest held under another repository with that digest has it", "mirror.example/app@" + d1, d1, []string{"reg.example/app@" + d1}, d1},
		{"a reference by digest held under another repository under another name has it", "mirror.example/app@" + d1, "", []string{"reg.example/other@" + d1}, d1},
		{"a reference by a digest the image was never pulled with has none", "reg.example/app@" + d2, d1, []string{"reg.example/app@" + d1}, ""},
		{"a tag pulled from its repository has the image's digest", "reg.example/app:v1", d1, []string{"reg.example/app@" + d2, "reg.example/app@" + d1}, d1},
		{"a tag pulled only from another repository has none", "mirror.example/app:v1", d1, []string{"reg.example/app@" + d1}, ""},
		{"a local build has none", "localhost/app:v1", d1, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := repoDigest(tc.ref, tc.own, tc.repoDigests); got != tc.want {
				t.Errorf("repoDigest(%q, %q, %q) = %q, want %q", tc.ref, tc.own, tc.repoDigests, got, tc.want)
			}
		})
	}
}
