package dev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/enroll"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// DeviceName is the id of the i-th simulated device (1-based).
func DeviceName(i int) string { return "sim-" + strconv.Itoa(i) }

// deviceLabels are the labels of the i-th simulated device: all
// role=analyzer and app=example (the reference harmony program's
// placement), the first of every three canary=true.
func deviceLabels(i int) map[string]string {
	l := map[string]string{"role": "analyzer", ExampleLabel: ExampleLabelValue}
	if i%3 == 1 {
		l["canary"] = "true"
	}
	return l
}

// device is one dev device: its id, labels and container runtime.
type device struct {
	name   string
	labels map[string]string
	// podman: the device drives the Podman engine (else a simulated
	// runtime of its own).
	podman bool
}

// devices are the simulated devices sim-1 … sim-n and, with an engine, the
// Podman device podman (role=analyzer, canary=true: the real engine is a
// canary, so what fails on it blocks the release); podman "" is none.
func devices(n int, podman string) []device {
	var out []device
	if podman != "" {
		out = append(out, device{name: podman, labels: map[string]string{"role": "analyzer", ExampleLabel: ExampleLabelValue, "canary": "true"}, podman: true})
	}
	for i := 1; i <= n; i++ {
		out = append(out, device{name: DeviceName(i), labels: deviceLabels(i)})
	}
	return out
}

// enrollDevice enrolls a device through package enroll as `fleet enroll`
// does: a machine user and key at the provider, the Device resource, the key
// file. A Device left by a previous run keeps its machine user (the
// provider's state file holds it; a new one when that file was deleted,
// and then its spec.identitySubject is updated) and gets a new key
// (Reattach).
func enrollDevice(ctx context.Context, en *enroll.Enroller, c client.Client, op *devop.Provider, ns, dir string, d device) (enroll.Result, error) {
	req := enroll.Request{Device: d.name, KeyFile: filepath.Join(dir, d.name+".key.json"), Overwrite: true, Labels: d.labels}
	res, err := en.Enroll(ctx, req)
	if !errors.Is(err, enroll.ErrAlreadyEnrolled) {
		return res, err
	}
	return Reattach(ctx, en, c, op, ns, req)
}

// waitIdentity waits until the operator projected the device's identity
// into fleet-identity (the callout refuses the device until then).
func waitIdentity(ctx context.Context, kv jetstream.KeyValue, subject, device string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	key, err := events.IdentityKey(subject)
	if err != nil {
		return fmt.Errorf("fleet dev: device %s: %w", device, err)
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		e, err := kv.Get(ctx, key)
		if err == nil && len(e.Value()) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fleet dev: the operator did not register device %s in %s within a minute: %w", device, events.BucketIdentity, ctx.Err())
		case <-t.C:
		}
	}
}

// runDevice connects one enrolled device with its machine key through the
// auth callout, like a real device, and runs the agent until ctx ends: on
// the Podman engine, or on a simulated runtime of its own. Its secrets and
// pull credentials come from the OpenBao stand-in, logging in with its
// id_token.
func runDevice(ctx context.Context, o Options, natsURL, issuer, audience string, d device, keyFile string, b *bao, eng *podmanEngine, m *agent.Metrics) error {
	dev := d.name
	log := o.Logger.With("device", dev)
	key, err := credential.ReadKeyFile(keyFile)
	if err != nil {
		return fmt.Errorf("fleet dev: device %s: %w", dev, err)
	}
	dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: natsURL, Key: &key, Device: dev, Issuer: issuer, Audience: audience, Logger: log,
		NATSOptions: []nats.Option{nats.RetryOnFailedConnect(true)}})
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	defer dc.Close()
	ds, err := b.deviceSecrets(dev, o.Namespace, dc.Source.IDToken)
	if err != nil {
		return err
	}
	rec := &agent.Reconciler{Device: dev, Secrets: ds, Credentials: ds, Log: log}
	if d.podman {
		rec.Runtime = eng.rt
		rec.EnsureHostPath = func(p string) error { return os.MkdirAll(p, 0o755) }
		rec.PortInUse = agent.HostPortInUse
	} else {
		rec.Runtime = openRegistry{sim.New(sim.Options{Behave: behave})}
	}
	return agent.Run(ctx, agent.Options{
		Device: dev, Conn: dc.Conn, Labels: d.labels, AgentVersion: "fleet-dev",
		// Re-read the intent every 30 s rather than every 5 minutes: a
		// dev device repairs a missed change quickly.
		ResyncInterval: devResync,
		Reconciler:     rec,
		Logger:         log,
		Metrics:        m,
	})
}

// behave is sim.DefaultBehaviour, except that an init container exits 0
// right after it starts (unless its image says exit-<n>): a simulated
// migration completes.
func behave(spec runtime.ContainerSpec) sim.Behaviour {
	b := sim.DefaultBehaviour(spec)
	if spec.Labels[agent.LabelRole] == "init" && !b.Exits {
		b = sim.Behaviour{Exits: true}
	}
	return b
}

// devResync is the simulated agents' resync interval.
const devResync = 30 * time.Second

// openRegistry is a simulated runtime whose registry serves every image
// without a credential, so any example pulls on a simulated device.
type openRegistry struct{ *sim.Runtime }

func (r openRegistry) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	if ok, err := r.ImageExists(ctx, ref); err == nil && !ok {
		r.Publish(ref, nil)
	}
	return r.Runtime.Pull(ctx, ref, auth)
}
