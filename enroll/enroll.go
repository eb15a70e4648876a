package enroll

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Provider is the identity provider's management seam. Zitadel's management
// API implements it in production; identity/devop.Provider implements it
// for tests and `fleet dev`.
type Provider interface {
	// CreateMachineUser creates (or finds, by name) a machine user and
	// returns its id, the OIDC subject of its tokens.
	CreateMachineUser(ctx context.Context, name string, roles ...string) (string, error)
	// AddMachineKey adds a key and returns the key file (with the private
	// key, which the provider does not keep). Zero expires: no expiry.
	AddMachineKey(ctx context.Context, userID string, expires time.Time) (credential.KeyFile, error)
	// RemoveMachineKey revokes a key.
	RemoveMachineKey(ctx context.Context, userID, keyID string) error
	// ListMachineKeys lists the ids of a user's keys.
	ListMachineKeys(ctx context.Context, userID string) ([]string, error)
}

// UserName is the machine user name of a device.
func UserName(device string) string { return "fleet-device-" + device }

// Options configure an Enroller.
type Options struct {
	// Client talks to the Kubernetes API (Device resources). Required.
	Client client.Client
	// Provider mints and revokes machine keys. Required.
	Provider Provider
	// Namespace of the Device resources. Required.
	Namespace string
	// KeyExpiry, when positive, makes keys expire that long after minting.
	KeyExpiry time.Duration
	// Issuer and Audience, when set, are written into the key file so the
	// device needs only the file and the NATS URL (credential.KeyFile).
	Issuer   string
	Audience string
	// Logger receives one record per step (ids only). Default: discard.
	Logger *slog.Logger
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("enroll: Client is nil"))
	}
	if o.Provider == nil {
		errs = append(errs, errors.New("enroll: Provider is nil"))
	}
	if o.Namespace == "" {
		errs = append(errs, errors.New("enroll: Namespace is empty"))
	}
	if o.KeyExpiry < 0 {
		errs = append(errs, errors.New("enroll: KeyExpiry is negative"))
	}
	return errors.Join(errs...)
}

// Enroller enrolls, re-enrolls and revokes devices.
type Enroller struct {
	o   Options
	log *slog.Logger
}

// New creates an Enroller.
func New(o Options) (*Enroller, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	e := &Enroller{o: o, log: o.Logger}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	return e, nil
}

// Result is what an enrollment produced (no secret).
type Result struct {
	// Device is the device id.
	Device string
	// Subject is the machine user id (Device spec.identitySubject).
	Subject string
	// KeyID is the id of the new key.
	KeyID string
	// KeyFile is where the key was written.
	KeyFile string
	// Revoked are the ids of keys removed by a re-enrollment.
	Revoked []string
}

// Request names the device and where its key file goes.
type Request struct {
	// Device is the device id (the Device resource's name).
	Device string
	// KeyFile is the path the key file is written to (mode 0600).
	KeyFile string
	// Overwrite allows replacing an existing key file.
	Overwrite bool
	// Labels are set on a new Device resource.
	Labels map[string]string
}

func (e *Enroller) expiry() time.Time {
	if e.o.KeyExpiry > 0 {
		return time.Now().Add(e.o.KeyExpiry)
	}
	return time.Time{}
}

func (r Request) check() error {
	if err := events.ValidateToken(events.TokenDevice, r.Device); err != nil {
		return fmt.Errorf("enroll: device id: %w", err)
	}
	if r.KeyFile == "" {
		return errors.New("enroll: KeyFile is empty: give the path the machine key is written to")
	}
	if !r.Overwrite {
		if _, err := os.Stat(r.KeyFile); err == nil {
			return fmt.Errorf("%w: %s (Request.Overwrite replaces it)", ErrKeyFileExists, r.KeyFile)
		}
	}
	return nil
}

// Enroll mints a machine user and key for a new device, creates its Device
// resource and writes the key file. A device that exists is refused with
// ErrAlreadyEnrolled. On failure after the key was minted the key is
// removed again.
func (e *Enroller) Enroll(ctx context.Context, r Request) (Result, error) {
	if err := r.check(); err != nil {
		return Result{}, err
	}
	var existing v1alpha1.Device
	err := e.o.Client.Get(ctx, types.NamespacedName{Namespace: e.o.Namespace, Name: r.Device}, &existing)
	if err == nil {
		return Result{}, fmt.Errorf("%w: %s/%s", ErrAlreadyEnrolled, e.o.Namespace, r.Device)
	}
	if !apierrors.IsNotFound(err) {
		return Result{}, fmt.Errorf("enroll: read Device %s/%s: %w", e.o.Namespace, r.Device, err)
	}
	uid, err := e.o.Provider.CreateMachineUser(ctx, UserName(r.Device))
	if err != nil {
		return Result{}, fmt.Errorf("enroll: create machine user: %w", err)
	}
	kf, err := e.o.Provider.AddMachineKey(ctx, uid, e.expiry())
	if err != nil {
		return Result{}, fmt.Errorf("enroll: add machine key: %w", err)
	}
	undo := func(cause error) error {
		if rerr := e.o.Provider.RemoveMachineKey(context.WithoutCancel(ctx), uid, kf.KeyID); rerr != nil {
			return errors.Join(cause, fmt.Errorf("enroll: remove the minted key %s again: %w", kf.KeyID, rerr))
		}
		return cause
	}
	dev := &v1alpha1.Device{
		ObjectMeta: metav1.ObjectMeta{Name: r.Device, Namespace: e.o.Namespace, Labels: r.Labels},
		Spec:       v1alpha1.DeviceSpec{IdentitySubject: uid},
	}
	if err := e.o.Client.Create(ctx, dev); err != nil {
		return Result{}, undo(fmt.Errorf("enroll: create Device %s/%s: %w", e.o.Namespace, r.Device, err))
	}
	kf.Issuer, kf.Audience, kf.Device = e.o.Issuer, e.o.Audience, r.Device
	if err := credential.WriteKeyFile(r.KeyFile, kf); err != nil {
		return Result{}, undo(err)
	}
	e.log.Info("device enrolled", "device", r.Device, "namespace", e.o.Namespace, "subject", uid, "keyId", kf.KeyID, "keyFile", r.KeyFile)
	return Result{Device: r.Device, Subject: uid, KeyID: kf.KeyID, KeyFile: r.KeyFile}, nil
}

func (e *Enroller) device(ctx context.Context, name string) (*v1alpha1.Device, error) {
	var d v1alpha1.Device
	err := e.o.Client.Get(ctx, types.NamespacedName{Namespace: e.o.Namespace, Name: name}, &d)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotEnrolled, e.o.Namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("enroll: read Device %s/%s: %w", e.o.Namespace, name, err)
	}
	return &d, nil
}

// Reenroll mints a new key for an enrolled device, writes it, then removes
// every other key of its machine user (a copied old key stops working).
func (e *Enroller) Reenroll(ctx context.Context, r Request) (Result, error) {
	if err := r.check(); err != nil {
		return Result{}, err
	}
	d, err := e.device(ctx, r.Device)
	if err != nil {
		return Result{}, err
	}
	uid := d.Spec.IdentitySubject
	old, err := e.o.Provider.ListMachineKeys(ctx, uid)
	if err != nil {
		return Result{}, fmt.Errorf("enroll: list keys: %w", err)
	}
	kf, err := e.o.Provider.AddMachineKey(ctx, uid, e.expiry())
	if err != nil {
		return Result{}, fmt.Errorf("enroll: add machine key: %w", err)
	}
	kf.Issuer, kf.Audience, kf.Device = e.o.Issuer, e.o.Audience, r.Device
	if err := credential.WriteKeyFile(r.KeyFile, kf); err != nil {
		if rerr := e.o.Provider.RemoveMachineKey(context.WithoutCancel(ctx), uid, kf.KeyID); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return Result{}, err
	}
	res := Result{Device: r.Device, Subject: uid, KeyID: kf.KeyID, KeyFile: r.KeyFile}
	for _, k := range old {
		if err := e.o.Provider.RemoveMachineKey(ctx, uid, k); err != nil {
			return res, fmt.Errorf("enroll: new key written, but old key %s not removed: %w", k, err)
		}
		res.Revoked = append(res.Revoked, k)
	}
	e.log.Info("device re-enrolled", "device", r.Device, "subject", uid, "keyId", kf.KeyID, "revoked", res.Revoked)
	return res, nil
}

// Revoke removes every key of an enrolled device and quarantines its Device
// (label blacklist=true): no new token can be minted, and the auth callout
// refuses the tokens already issued at the next connect once the operator
// has projected the label into fleet-identity.
func (e *Enroller) Revoke(ctx context.Context, device string) (Result, error) {
	d, err := e.device(ctx, device)
	if err != nil {
		return Result{}, err
	}
	uid := d.Spec.IdentitySubject
	keys, err := e.o.Provider.ListMachineKeys(ctx, uid)
	if err != nil {
		return Result{}, fmt.Errorf("enroll: list keys: %w", err)
	}
	res := Result{Device: device, Subject: uid}
	for _, k := range keys {
		if err := e.o.Provider.RemoveMachineKey(ctx, uid, k); err != nil {
			return res, fmt.Errorf("enroll: remove key %s: %w", k, err)
		}
		res.Revoked = append(res.Revoked, k)
	}
	patch := client.MergeFrom(d.DeepCopy())
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	d.Labels[v1alpha1.LabelBlacklist] = "true"
	if err := e.o.Client.Patch(ctx, d, patch); err != nil {
		return res, fmt.Errorf("enroll: keys removed, but quarantining Device %s/%s failed: %w", e.o.Namespace, device, err)
	}
	e.log.Info("device revoked", "device", device, "subject", uid, "revoked", res.Revoked)
	return res, nil
}
