package harmony

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// Labels and annotations harmony puts on the Deployment.
const (
	// LabelManagedBy marks Deployments applied by harmony.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationTag holds the --tag of the last ship or deploy. An
	// annotation does not change the generation: the same digests under a
	// new tag make no new revision.
	AnnotationTag = "harmony.nationtech.io/tag"
)

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
	tagRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	// transitKeyName is an OpenBao transit key name (framework.GenericNameRegex).
	transitKeyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// validateApp checks the parts of the manifest harmony must know before it
// builds anything: that every name harmony derives a reference or a
// container from is set, that services name declared images and every
// declared image is used, and what the Fleet Deployment's schema would
// refuse only after every image was built and pushed (container names,
// duplicate names, ports, a host port published twice, an init container
// with ports). Container names and port mappings are checked with the score
// package's rules, the Deployment CRD's.
func validateApp(app HarmonyApp) error {
	images := map[string]bool{}
	for i, im := range app.Images() {
		switch {
		case !dnsLabel.MatchString(im.Name):
			return fmt.Errorf("%w: Images()[%d].Name %q must be a lowercase DNS label (it is the image's repository name)", ErrManifest, i, im.Name)
		case images[im.Name]:
			return fmt.Errorf("%w: Images()[%d].Name %q is declared twice", ErrManifest, i, im.Name)
		case im.Context == "":
			return fmt.Errorf("%w: Images()[%d] (%s): Context is empty: give the build context folder", ErrManifest, i, im.Name)
		}
		images[im.Name] = true
	}
	d := app.Deployment()
	if !dnsLabel.MatchString(d.Name) {
		return fmt.Errorf("%w: Deployment().Name %q must be a DNS label", ErrManifest, d.Name)
	}
	if len(d.Services) == 0 {
		return fmt.Errorf("%w: Deployment().Services is empty: declare at least one service", ErrManifest)
	}
	names := map[string]string{} // container name → the field that declared it
	check := func(field string, s Service) error {
		switch {
		case s.Name == "":
			return fmt.Errorf("%w: %s.Name is empty", ErrManifest, field)
		case score.ValidateName(s.Name) != nil:
			return fmt.Errorf("%w: %s.Name %q is not a container name (at most 63 letters, digits, '_', '.', '-', starting with a letter or digit)", ErrManifest, field, s.Name)
		case names[s.Name] != "":
			return fmt.Errorf("%w: %s.Name %q is also the name of %s: every container of the Deployment needs its own name", ErrManifest, field, s.Name, names[s.Name])
		case !images[s.Image]:
			return fmt.Errorf("%w: %s (%s).Image %q is not one of Images(): %s", ErrManifest, field, s.Name, s.Image, strings.Join(slices.Sorted(maps.Keys(images)), ", "))
		}
		names[s.Name] = field
		if s.Healthcheck != nil {
			if err := score.ValidateHealthcheck(fmt.Sprintf("%s (%s).Healthcheck", field, s.Name), scoreHealthcheck(*s.Healthcheck)); err != nil {
				return fmt.Errorf("%w: %w", ErrManifest, err)
			}
		}
		for j, p := range s.Ports {
			if _, err := score.ParsePort(p); err != nil {
				return fmt.Errorf("%w: %s (%s).Ports[%d] %q is not a port mapping: write \"host:container\" with both in 1..65535, optionally with /tcp or /udp (\"8080:80\")", ErrManifest, field, s.Name, j, p)
			}
		}
		return nil
	}
	if d.Init != nil {
		if err := check("Deployment().Init", *d.Init); err != nil {
			return err
		}
		if d.Init.Healthcheck != nil {
			return fmt.Errorf("%w: Deployment().Init (%s).Healthcheck must be nil: an init container runs to completion; give the check to a service", ErrManifest, d.Init.Name)
		}
		if len(d.Init.Ports) > 0 {
			return fmt.Errorf("%w: Deployment().Init (%s).Ports must be empty: an init container runs to completion and publishes no port; publish ports on a service in Deployment().Services", ErrManifest, d.Init.Name)
		}
	}
	ports, total := make([][]string, len(d.Services)), 0
	for i, s := range d.Services {
		if err := check(fmt.Sprintf("Deployment().Services[%d]", i), s); err != nil {
			return err
		}
		ports[i], total = s.Ports, total+len(s.Ports)
	}
	if cs := score.HostPortClashes(ports); len(cs) > 0 {
		c, s, f := cs[0], d.Services[cs[0].Service], d.Services[cs[0].FirstService]
		return fmt.Errorf("%w: Deployment().Services[%d] (%s).Ports[%d] %q: host port %s/%d is also published by Deployment().Services[%d] (%s).Ports[%d]: %s",
			ErrManifest, c.Service, s.Name, c.Mapping, s.Ports[c.Mapping], c.Protocol, c.Host, c.FirstService, f.Name, c.FirstMapping, score.PortClashFix)
	}
	if total > score.MaxPublishedPorts {
		return fmt.Errorf("%w: Deployment().Services publish %d ports in all: use at most %d across all services", ErrManifest, total, score.MaxPublishedPorts)
	}
	if err := validateRollout(d.Rollout); err != nil {
		return err
	}
	used := usedImages(d)
	for i, im := range app.Images() {
		if !slices.Contains(used, im.Name) {
			return fmt.Errorf("%w: Images()[%d] (%s) is used by no service: ship builds and pushes every declared image, so use it in Deployment().Services or Deployment().Init, or remove it from Images()", ErrManifest, i, im.Name)
		}
	}
	return nil
}

// usedImages are the names of the images the Deployment's containers run,
// sorted.
func usedImages(d Deployment) []string {
	set := map[string]bool{}
	if d.Init != nil {
		set[d.Init.Image] = true
	}
	for _, s := range d.Services {
		set[s.Image] = true
	}
	return slices.Sorted(maps.Keys(set))
}

// selectContext returns the context named name.
func selectContext(app HarmonyApp, name string) (Context, error) {
	var names []string
	for _, c := range app.Contexts() {
		if c.Name == name {
			return withDefaults(c), nil
		}
		names = append(names, c.Name)
	}
	if name == "" {
		return Context{}, usageError("--context is required: one of %s", strings.Join(names, ", "))
	}
	return Context{}, usageError("--context %q is not compiled into this harmony: use one of %s", name, strings.Join(names, ", "))
}

// withDefaults fills the OpenBao defaults documented on OpenBao.
func withDefaults(c Context) Context {
	if c.OpenBao.JWTMount == "" {
		c.OpenBao.JWTMount = "jwt"
	}
	if c.OpenBao.KVMount == "" {
		c.OpenBao.KVMount = "secret"
	}
	if c.OpenBao.RegistryCredentials == "" {
		c.OpenBao.RegistryCredentials = "harmony/" + c.Namespace + "/" + c.Name + "/RegistryCredentials"
	}
	if c.OpenBao.Kubeconfig == "" {
		c.OpenBao.Kubeconfig = "harmony/" + c.Namespace + "/" + c.Name + "/kubeconfig"
	}
	if c.OpenBao.SigningKey == "" {
		c.OpenBao.SigningKey = "harmony/" + c.Namespace + "/" + c.Name + "/signing-key"
	}
	if c.OpenBao.TransitMount == "" {
		c.OpenBao.TransitMount = "transit"
	}
	return c
}

// validateContext checks the coordinates ship and deploy need.
func validateContext(c Context, push bool) error {
	field := func(name, v string) error {
		if v == "" {
			return fmt.Errorf("%w: context %q: %s is empty", ErrManifest, c.Name, name)
		}
		return nil
	}
	for _, f := range []struct{ name, v string }{
		{"Namespace", c.Namespace}, {"OpenBao.URL", c.OpenBao.URL}, {"OpenBao.Role", c.OpenBao.Role}, {"Zitadel.URL", c.Zitadel.URL},
	} {
		if err := field(f.name, f.v); err != nil {
			return err
		}
	}
	if push {
		if err := field("Registry", c.Registry); err != nil {
			return err
		}
		if err := field("Repository", c.Repository); err != nil {
			return err
		}
	}
	if c.Signing != nil && c.Signing.TransitKey != "" && !transitKeyName.MatchString(c.Signing.TransitKey) {
		return fmt.Errorf("%w: context %q: Signing.TransitKey %q is not an OpenBao transit key name: use letters, digits, '-', '_' and '.' only (the name, not a path)",
			ErrManifest, c.Name, c.Signing.TransitKey)
	}
	if c.Signing != nil && len(c.Signing.TrustedKeys) > 0 {
		if err := sigkeys.CheckKeys("Signing.TrustedKeys", trustedKeys(c)); err != nil {
			return fmt.Errorf("%w: context %q: %w", ErrManifest, c.Name, err)
		}
	}
	return nil
}

// trustedKeys are the context's trusted keys as the signature packages
// name them.
func trustedKeys(c Context) []sigkeys.Key {
	if c.Signing == nil {
		return nil
	}
	keys := make([]sigkeys.Key, len(c.Signing.TrustedKeys))
	for i, k := range c.Signing.TrustedKeys {
		keys[i] = sigkeys.Key{Name: k.Name, PublicKey: k.PublicKey}
	}
	return keys
}

// signaturePolicy is the Deployment's spec.signatures of context c: nil
// when it does not sign.
func signaturePolicy(c Context) *fleetv1.SignaturePolicy {
	if c.Signing == nil {
		return nil
	}
	p := &fleetv1.SignaturePolicy{}
	for _, k := range c.Signing.TrustedKeys {
		p.Keys = append(p.Keys, fleetv1.TrustedKey{Name: k.Name, PublicKey: k.PublicKey})
	}
	return p
}

// imageRepository is <registry>/<repository>/<image>.
func imageRepository(c Context, image string) string {
	return c.Registry + "/" + strings.Trim(c.Repository, "/") + "/" + image
}

// dockerfile is the image's Dockerfile path.
func dockerfile(im Image) string {
	if im.Dockerfile != "" {
		return im.Dockerfile
	}
	return filepath.Join(im.Context, "Dockerfile")
}

// validateTag checks --tag: an explicit image tag, never latest.
func validateTag(tag string) error {
	switch {
	case tag == "":
		return usageError("--tag is required: pass the commit (for example --tag \"$CI_COMMIT_SHA\")")
	case tag == "latest":
		return usageError("--tag latest is mutable: pass the commit (for example --tag \"$CI_COMMIT_SHA\")")
	case !tagRE.MatchString(tag):
		return usageError("--tag %q is not an image tag (letters, digits, '_', '.', '-'; at most 128; not starting with '.' or '-')", tag)
	}
	return nil
}

// checkDeployRef accepts a registry digest (repo@sha256:…, optionally with
// a tag before it) or an explicit dev-* tag with a non-empty suffix, and
// refuses latest, a bare "dev-" and every other tag.
func checkDeployRef(name, ref string) error {
	fix := "pass the registry digest (repo@sha256:<64 hex>) or an explicit dev-* tag"
	if repo, digest, ok := strings.Cut(ref, "@"); ok {
		if repo == "" || !digestRE.MatchString(digest) {
			return usageError("--image %s=%s: %q is not a sha256 digest: %s", name, ref, digest, fix)
		}
		return nil
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash || colon == len(ref)-1 {
		return fmt.Errorf("%w: --image %s=%s has no tag, so it means latest, which is mutable: %s", ErrMutableTag, name, ref, fix)
	}
	tag := ref[colon+1:]
	switch {
	case !tagRE.MatchString(tag):
		return usageError("--image %s=%s: %q is not an image tag: %s", name, ref, tag, fix)
	case tag == "latest":
		return fmt.Errorf("%w: --image %s=%s: tag latest is mutable: %s", ErrMutableTag, name, ref, fix)
	case !strings.HasPrefix(tag, "dev-"):
		return fmt.Errorf("%w: --image %s=%s: tag %q can be moved to another image: %s", ErrMutableTag, name, ref, tag, fix)
	case tag == "dev-":
		return usageError("--image %s=%s: tag \"dev-\" names no build: put the build after dev- (for example dev-<branch>-<commit>), or pass the registry digest (repo@sha256:<64 hex>)", name, ref)
	}
	return nil
}

// fleetDeployment is the Fleet Deployment of app in context c with each
// image name resolved to refs[name].
func fleetDeployment(app HarmonyApp, c Context, tag string, refs map[string]string) *fleetv1.Deployment {
	d := app.Deployment()
	out := &fleetv1.Deployment{
		Spec: fleetv1.DeploymentSpec{
			AllowedGroups:  slices.Clone(d.AllowedGroups),
			TargetSelector: fleetv1.TargetSelector{MatchLabels: maps.Clone(d.Placement)},
			Rollout:        rolloutSpec(d.Rollout),
			Score:          score.Score{Type: score.TypePodmanV0},
		},
	}
	out.Name, out.Namespace = d.Name, c.Namespace
	out.Spec.Signatures = signaturePolicy(c)
	out.Labels = map[string]string{LabelManagedBy: "harmony"}
	out.Annotations = map[string]string{AnnotationTag: tag}
	if d.Init != nil {
		s := podmanService(*d.Init, refs)
		s.RestartPolicy, s.Ports = "no", nil
		out.Spec.Score.Data.InitContainer = &s
	}
	for _, s := range d.Services {
		out.Spec.Score.Data.Services = append(out.Spec.Score.Data.Services, podmanService(s, refs))
	}
	return out
}

func podmanService(s Service, refs map[string]string) score.Service {
	p := score.Service{
		Name:            s.Name,
		Image:           refs[s.Image],
		Ports:           slices.Clone(s.Ports),
		RestartPolicy:   score.RestartPolicy(s.RestartPolicy),
		ImagePullSecret: s.ImagePullSecret,
	}
	if p.RestartPolicy == "" {
		p.RestartPolicy = "unless-stopped"
	}
	for _, e := range s.Env {
		p.Env = append(p.Env, score.EnvVar{Name: e.Name, Value: e.Value})
	}
	for _, e := range s.SecretEnv {
		p.SecretEnv = append(p.SecretEnv, score.SecretEnv{Name: e.Name, Secret: e.Secret, Key: e.Key})
	}
	for _, v := range s.Volumes {
		p.Volumes = append(p.Volumes, score.Volume{HostPath: v.HostPath, ContainerPath: v.ContainerPath, ReadOnly: v.ReadOnly})
	}
	if h := s.Healthcheck; h != nil {
		sh := scoreHealthcheck(*h)
		p.Healthcheck = &sh
	}
	return p
}

// scoreHealthcheck is h in the score's form: durations as Go duration
// strings, zero ones left out (Podman's defaults).
func scoreHealthcheck(h Healthcheck) score.Healthcheck {
	d := func(x time.Duration) string {
		if x == 0 {
			return ""
		}
		return x.String()
	}
	out := score.Healthcheck{Command: slices.Clone(h.Command), Interval: d(h.Interval), Timeout: d(h.Timeout), Retries: int32(h.Retries)}
	if h.StartPeriod != 0 {
		out.StartPeriod = h.StartPeriod.String()
	}
	return out
}

// validateRollout checks a Rollout as the API server would, naming the
// field and the fix, so ship fails before it builds anything.
func validateRollout(r *Rollout) error {
	if r == nil {
		return nil
	}
	if len(r.Batches) > fleetv1.MaxRolloutBatches {
		return fmt.Errorf("%w: Deployment().Rollout.Batches has %d batches: use at most %d", ErrManifest, len(r.Batches), fleetv1.MaxRolloutBatches)
	}
	for i, b := range r.Batches {
		f := fmt.Sprintf("Deployment().Rollout.Batches[%d]", i)
		set := 0
		for _, ok := range []bool{b.Count != 0, b.Percent != 0, len(b.Selector) > 0} {
			if ok {
				set++
			}
		}
		switch {
		case set != 1:
			return fmt.Errorf("%w: %s: set exactly one of Count, Percent and Selector", ErrManifest, f)
		case b.Count < 0:
			return fmt.Errorf("%w: %s.Count %d: use 1 or more", ErrManifest, f, b.Count)
		case b.Percent < 0 || b.Percent > 100:
			return fmt.Errorf("%w: %s.Percent %d: use 1 to 100", ErrManifest, f, b.Percent)
		case b.SuccessThreshold < 0 || b.SuccessThreshold > 100:
			return fmt.Errorf("%w: %s.SuccessThreshold %d: use 1 to 100 (0: 100)", ErrManifest, f, b.SuccessThreshold)
		case b.Soak < 0 || b.Soak > 24*time.Hour || b.Soak%time.Second != 0:
			return fmt.Errorf("%w: %s.Soak %s: use whole seconds up to 24h", ErrManifest, f, b.Soak)
		}
	}
	switch r.OnFailure {
	case "", string(fleetv1.RolloutOnFailureFail), string(fleetv1.RolloutOnFailurePause), string(fleetv1.RolloutOnFailureRollback):
	default:
		return fmt.Errorf("%w: Deployment().Rollout.OnFailure %q: use Fail, Pause or Rollback", ErrManifest, r.OnFailure)
	}
	if b := r.DisruptionBudget; b != nil {
		switch {
		case b.LabelKey == "":
			return fmt.Errorf("%w: Deployment().Rollout.DisruptionBudget.LabelKey is empty: name the label that groups the devices (e.g. site)", ErrManifest)
		case (b.MaxUnavailable > 0) == (b.MaxUnavailablePercent > 0) || b.MaxUnavailable < 0 || b.MaxUnavailablePercent < 0 || b.MaxUnavailablePercent > 100:
			return fmt.Errorf("%w: Deployment().Rollout.DisruptionBudget: set exactly one of MaxUnavailable (1 or more) and MaxUnavailablePercent (1 to 100)", ErrManifest)
		}
	}
	return nil
}

// rolloutSpec is the Deployment's rollout: the product's without a Rollout.
func rolloutSpec(r *Rollout) fleetv1.RolloutSpec {
	out := fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate}
	if r == nil {
		return out
	}
	for _, b := range r.Batches {
		fb := fleetv1.RolloutBatch{SuccessThreshold: int32(b.SuccessThreshold)}
		switch {
		case b.Count != 0:
			fb.Count = new(int32(b.Count))
		case b.Percent != 0:
			fb.Percent = new(int32(b.Percent))
		default:
			fb.Selector = &fleetv1.TargetSelector{MatchLabels: maps.Clone(b.Selector)}
		}
		if fb.SuccessThreshold == 0 {
			fb.SuccessThreshold = 100
		}
		if b.Soak > 0 {
			fb.Soak = b.Soak.String()
		}
		out.Batches = append(out.Batches, fb)
	}
	if r.ManualApproval {
		out.Approval = fleetv1.RolloutApprovalManual
	}
	out.OnFailure = fleetv1.RolloutOnFailure(r.OnFailure)
	if b := r.DisruptionBudget; b != nil {
		mu := intstr.FromInt32(int32(b.MaxUnavailable))
		if b.MaxUnavailablePercent > 0 {
			mu = intstr.FromString(fmt.Sprintf("%d%%", b.MaxUnavailablePercent))
		}
		out.DisruptionBudget = &fleetv1.DisruptionBudget{LabelKey: b.LabelKey, MaxUnavailable: mu}
	}
	return out
}
