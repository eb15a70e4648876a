package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Actions is what the dashboard changes. Every method records who asked.
type Actions interface {
	// SetQuarantine adds (quarantine true) or removes the blacklist label
	// of the Device namespace/device and records the action naming the
	// user. ErrNotFound when there is no such Device.
	SetQuarantine(ctx context.Context, namespace, device string, quarantine bool, u User) error
	// SendCommand asks the device's agent for command and records it; it
	// returns the command's id, which the agent's result names.
	SendCommand(ctx context.Context, namespace, device, command string, u User) (string, error)
	// CommandResult returns the agent's answer to command id, nil while
	// there is none.
	CommandResult(ctx context.Context, device, id string) (*CommandResult, error)
	// QuarantineStatus says whether the device is quarantined and whether
	// the auth callout refuses it yet.
	QuarantineStatus(ctx context.Context, namespace, device string) (QuarantineStatus, error)
	// RequestRollout asks the operator, as the user, to pause, resume or
	// approve (batch; 0: the one waiting) the rollout of the Deployment
	// namespace/name's current generation, and returns the request
	// written. A refusal of the API server (RBAC, admission) wraps
	// ErrRefusedByKubernetes.
	RequestRollout(ctx context.Context, namespace, name string, action fleetv1.RolloutActionKind, batch int, u User) (fleetv1.RolloutAction, error)
}

// QuarantineStatus is a device's quarantine as the control plane sees it.
type QuarantineStatus struct {
	// Labelled is true when the Device carries the blacklist label.
	Labelled bool
	// Action, User and Time are the last dashboard action's annotations
	// (empty when the dashboard never changed the Device).
	Action, User, Time string
	// Identity is the Device's identity subject; "" when it has none.
	Identity string
	// Registered is true when fleet-identity holds the identity's entry;
	// CalloutRefuses is its quarantine flag: the auth callout refuses the
	// identity and has disconnected its connections.
	Registered     bool
	CalloutRefuses bool
}

// Pending reports whether the operator has not yet projected the label
// into fleet-identity (the callout still admits a quarantined device, or
// still refuses a released one).
func (q QuarantineStatus) Pending() bool {
	return q.Registered && q.Labelled != q.CalloutRefuses
}

// CommandResult is an agent's answer to a command.
type CommandResult struct {
	// Command is the command the agent names in its answer (device data:
	// shown escaped, bounded, fleetview.Clean).
	Command string
	OK      bool
	// Error is the agent's error text (device data: shown escaped,
	// bounded, fleetview.Clean).
	Error string
	// Time is when the stream stored the answer.
	Time time.Time
}

// Annotations the dashboard sets on a Device it quarantines or releases:
// the last dashboard action, who asked it and when (RFC 3339, UTC). ADR
// 0012 says why annotations and a field manager rather than
// impersonation.
const (
	AnnotationAction = "fleet.nationtech.io/dashboard-action"
	AnnotationUser   = "fleet.nationtech.io/dashboard-user"
	AnnotationTime   = "fleet.nationtech.io/dashboard-time"
	// FieldManager is the field manager of the dashboard's changes.
	FieldManager = "fleet-dashboard"
)

// FleetActions changes Device resources through the Kubernetes API and
// appends to the streams. Create it with NewFleetActions.
type FleetActions struct {
	kube client.Client
	// impersonate is the dashboard's own API server configuration, copied
	// with the user's identity for each rollout request; nil: none.
	impersonate *rest.Config
	store       *events.Store
	identity    jetstream.KeyValue
	log         *slog.Logger
	now         func() time.Time
}

// NewFleetActions returns the live Actions: kube patches Devices (it must
// read from the API server, not a cache, so the optimistic lock sees the
// current resource version); impersonate is the dashboard's configuration
// of the same API server, used with each user's identity for rollout
// requests (nil: RequestRollout answers ErrNotImplemented; its service
// account needs impersonate on users and groups, ADR 0022); store appends
// to FLEET_COMMANDS and FLEET_AUDIT and reads FLEET_REPORTS, identity is
// the fleet-identity bucket (read only).
func NewFleetActions(kube client.Client, impersonate *rest.Config, store *events.Store, identity jetstream.KeyValue, log *slog.Logger) (*FleetActions, error) {
	if kube == nil || store == nil || identity == nil {
		return nil, fmt.Errorf("%w: NewFleetActions needs a Kubernetes client, an event store and the %s bucket", ErrInvalidOptions, events.BucketIdentity)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &FleetActions{kube: kube, impersonate: impersonate, store: store, identity: identity, log: log, now: time.Now}, nil
}

// QuarantineStatus implements Actions: the Device's label and annotations
// from the API server, the identity's fleet-identity entry from the
// bucket.
func (a *FleetActions) QuarantineStatus(ctx context.Context, namespace, device string) (QuarantineStatus, error) {
	var d fleetv1.Device
	if err := a.kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: device}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return QuarantineStatus{}, fmt.Errorf("%w: no Device %s/%s", ErrNotFound, namespace, device)
		}
		return QuarantineStatus{}, fmt.Errorf("read Device %s/%s: %w", namespace, device, err)
	}
	_, labelled := d.Labels[fleetv1.LabelBlacklist]
	q := QuarantineStatus{Labelled: labelled, Action: d.Annotations[AnnotationAction], User: d.Annotations[AnnotationUser],
		Time: d.Annotations[AnnotationTime], Identity: d.Spec.IdentitySubject}
	key, err := events.IdentityKey(d.Spec.IdentitySubject)
	if err != nil {
		return q, nil
	}
	e, err := a.identity.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return q, nil
	}
	if err != nil {
		return q, fmt.Errorf("read %s/%s: %w", events.BucketIdentity, key, err)
	}
	ie, err := events.DecodeIdentityEntry(e.Value())
	if err != nil || ie.Device != device {
		return q, nil
	}
	q.Registered, q.CalloutRefuses = true, ie.Quarantined
	return q, nil
}

// SetQuarantine implements Actions: a merge patch of the label and the
// annotations under field manager FieldManager, conditional on the
// resource version read (a conflict is retried), then a
// dashboard.device.action event.
func (a *FleetActions) SetQuarantine(ctx context.Context, namespace, device string, quarantine bool, u User) error {
	if err := events.ValidateToken(events.TokenDevice, device); err != nil {
		return fmt.Errorf("%w: device: %w", ErrInvalidInput, err)
	}
	action := events.ActionRelease
	if quarantine {
		action = events.ActionQuarantine
	}
	var err error
	for range 5 {
		err = a.patchDevice(ctx, namespace, device, quarantine, action, u)
		if !apierrors.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return err
	}
	ev, err := events.New(events.Keys{Device: device}, events.DashboardDeviceAction{Action: action, Namespace: namespace, User: u.Name, UserSubject: u.Subject})
	if err != nil {
		return err
	}
	if _, err := a.store.Append(ctx, ev); err != nil {
		return fmt.Errorf("the Device is changed but its audit event was not stored: %w", err)
	}
	a.log.Info("device "+action, "namespace", namespace, "device", device, "user", u.Name, "user_subject", u.Subject, "event", ev.ID.String())
	return nil
}

func (a *FleetActions) patchDevice(ctx context.Context, namespace, device string, quarantine bool, action string, u User) error {
	var d fleetv1.Device
	if err := a.kube.Get(ctx, client.ObjectKey{Namespace: namespace, Name: device}, &d); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: no Device %s/%s", ErrNotFound, namespace, device)
		}
		return fmt.Errorf("read Device %s/%s: %w", namespace, device, err)
	}
	orig := d.DeepCopy()
	if d.Labels == nil {
		d.Labels = map[string]string{}
	}
	if quarantine {
		d.Labels[fleetv1.LabelBlacklist] = "true"
	} else {
		delete(d.Labels, fleetv1.LabelBlacklist)
	}
	if d.Annotations == nil {
		d.Annotations = map[string]string{}
	}
	d.Annotations[AnnotationAction] = action
	d.Annotations[AnnotationUser] = u.Name
	d.Annotations[AnnotationTime] = a.now().UTC().Format(time.RFC3339)
	if err := a.kube.Patch(ctx, &d, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("patch Device %s/%s: %w", namespace, device, err)
	}
	return nil
}

// SendCommand implements Actions: an agent.command event on the device's
// command subject (RequestedBy: the user's name), then a
// dashboard.device.action event naming it.
func (a *FleetActions) SendCommand(ctx context.Context, namespace, device, command string, u User) (string, error) {
	if err := events.ValidateToken(events.TokenDevice, device); err != nil {
		return "", fmt.Errorf("%w: device: %w", ErrInvalidInput, err)
	}
	cmd, err := events.New(events.Keys{Device: device}, events.AgentCommand{Command: command, RequestedBy: u.Name})
	if err != nil {
		return "", err
	}
	if _, err := a.store.Append(ctx, cmd); err != nil {
		return "", fmt.Errorf("append the agent command: %w", err)
	}
	id := cmd.ID.String()
	ev, err := events.New(events.Keys{Device: device}, events.DashboardDeviceAction{Action: events.ActionCommand, Namespace: namespace,
		User: u.Name, UserSubject: u.Subject, Command: command, CommandID: id})
	if err != nil {
		return "", err
	}
	if _, err := a.store.Append(ctx, ev); err != nil {
		return "", fmt.Errorf("the command was sent but its audit event was not stored: %w", err)
	}
	a.log.Info("agent command sent", "namespace", namespace, "device", device, "command", command, "command_id", id, "user", u.Name, "user_subject", u.Subject)
	return id, nil
}

// CommandResult implements Actions: it replays the device's command
// results from the command's time (its ULID's) and returns the one naming
// id.
func (a *FleetActions) CommandResult(ctx context.Context, device, id string) (*CommandResult, error) {
	uid, err := ulid.ParseStrict(id)
	if err != nil {
		return nil, fmt.Errorf("%w: command id %q is not a ULID", ErrInvalidInput, id)
	}
	subj, err := events.ReportSubject(device, events.ReportCommand)
	if err != nil {
		return nil, fmt.Errorf("%w: device: %w", ErrInvalidInput, err)
	}
	from := ulid.Time(uid.Time()).Add(-time.Minute)
	for rec, err := range a.store.Replay(ctx, subj, events.FromTime(from)) {
		if err != nil {
			var re *events.RecordError
			if errors.As(err, &re) {
				continue
			}
			return nil, err
		}
		res, err := events.Decode[events.CommandResult](rec.Event)
		if err != nil || res.CommandID != id {
			continue
		}
		// Both are the device's text: escaped and cut as the view's.
		return &CommandResult{Command: fleetview.Clean(res.Command, fleetview.MaxFieldLength), OK: res.OK,
			Error: fleetview.Clean(res.Error, fleetview.MaxErrorLength), Time: rec.Stored}, nil
	}
	return nil, nil
}

// MockActions are the Actions of serve-web --mock: they change nothing
// outside the process and answer every command at once with a mock result.
type MockActions struct {
	mu sync.Mutex
	// quarantined holds namespace/device of quarantined devices; results
	// the mock answers by command id; both guarded by mu.
	quarantined map[string]bool
	results     map[string]CommandResult
}

// NewMockActions returns Actions for mock data.
func NewMockActions() *MockActions {
	return &MockActions{quarantined: map[string]bool{}, results: map[string]CommandResult{}}
}

// SetQuarantine implements Actions in memory.
func (m *MockActions) SetQuarantine(_ context.Context, namespace, device string, quarantine bool, _ User) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.quarantined[namespace+"/"+device] = quarantine
	return nil
}

// QuarantineStatus implements Actions: what the mock recorded, the
// mock callout following at once.
func (m *MockActions) QuarantineStatus(_ context.Context, namespace, device string) (QuarantineStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q, ok := m.quarantined[namespace+"/"+device]
	if !ok {
		// Never changed here: the page shows the mock view's label.
		return QuarantineStatus{}, nil
	}
	return QuarantineStatus{Labelled: q, Identity: "mock-" + device, Registered: true, CalloutRefuses: q}, nil
}

// SendCommand implements Actions: the mock answers at once.
func (m *MockActions) SendCommand(_ context.Context, _, _ string, command string, _ User) (string, error) {
	id := ulid.Make().String()
	m.mu.Lock()
	defer m.mu.Unlock()
	known := slices.ContainsFunc(DefaultCommands, func(c Command) bool { return c.Name == command })
	res := CommandResult{Command: command, OK: known, Time: time.Now()}
	if !known {
		res.Error = fmt.Sprintf("unknown command %q (mock agent)", command)
	}
	m.results[id] = res
	return id, nil
}

// RequestRollout implements Actions: the mock records nothing and answers
// as the API server would for a user with the fleet-admin Kubernetes
// role; a user without it is refused.
func (m *MockActions) RequestRollout(_ context.Context, namespace, name string, action fleetv1.RolloutActionKind, batch int, u User) (fleetv1.RolloutAction, error) {
	ra := fleetv1.RolloutAction{Action: action, Batch: batch, By: u.KubeUser, Generation: 1, Request: ulid.Make().String()}
	if action == fleetv1.RolloutActionApprove && ra.Batch == 0 {
		ra.Batch = 1
	}
	if !slices.Contains(u.KubeGroups, RoleAdmin) {
		return ra, fmt.Errorf("%w: (mock) deployments.fleet.nationtech.io %q is forbidden: User %q cannot patch resource \"deployments\" in API group \"fleet.nationtech.io\" in the namespace %q",
			ErrRefusedByKubernetes, name, u.KubeUser, namespace)
	}
	return ra, nil
}

// CommandResult implements Actions.
func (m *MockActions) CommandResult(_ context.Context, _, id string) (*CommandResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.results[id]; ok {
		return &r, nil
	}
	return nil, nil
}
