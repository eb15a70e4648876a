// Package fleetview owns the dashboard's read models: what each page of the
// operator's web dashboard shows (the fleet overview, the device list and a
// device's page, the Deployment list and a Deployment's page, TaskRuns, the
// alerts derived from state, the 24-hour trend) and the change feed that tells
// which pages a live update affects.
//
// It reads Devices, Deployments and TaskRuns from an informer cache (a
// controller-runtime client.Reader backed by a cache: never a LIST against
// the API server per request) and the event streams through the events and
// history packages. It never re-implements rollout logic: per-device rollout
// state, the canary stage, revision history and the fleet as it was at a past
// time are the history package's answers, which are the projections'
// folds.
//
// Device data is hostile: every string a device reports is bounded and made
// valid UTF-8 before it reaches a view, and a report is attributed to the
// device its subject names (events.DecodeStored refuses the others).
//
// [Source] is what the HTTP layer consumes; [NewLive] serves a Fleet,
// [Mock] generated data for serve-web --mock. It may import k8s/api,
// events, projections and history; never the operator or the agent. Only the
// dashboard and cmd/ import it.
package fleetview
