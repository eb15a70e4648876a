// Package dashboard owns the operator's web dashboard's web surface: sign-in
// (OpenID Connect authorization code flow with PKCE against Zitadel, or the
// development provider), sessions (sealed, expiring cookies), the pages
// (server-rendered html/template, assets embedded, no JavaScript needed), the
// two actions the spec gives the dashboard (quarantine or release a device,
// send an agent command) plus alert acknowledgements, and live updates
// (server-sent events fed by the read models' change feed).
//
// What a page shows comes from a [fleetview.Source] (package
// dashboard/fleetview owns the read models); what an action changes goes
// through an [Actions] (the Device resource and the event streams) and
// acknowledgements through an [Acks] (the FLEET_AUDIT stream). [NewFleetActions] and
// [NewStreamAcks] are the live ones; [NewMockActions] and [NewMemoryAcks]
// serve `serve-web --mock`, whose every page says it shows mock data.
//
// Invariants: every page but sign-in, sign-out, the assets and /healthz needs
// a session whose id_token carried the fleet-admin role (otherwise 403);
// every state-changing request is a POST with the session's synchronizer
// token and an Origin (or Referer) of the dashboard's public URL, and is
// recorded with the user's identity in the change it makes and in an event
// of FLEET_AUDIT; no secret (session key, client secret, token, code,
// password) is ever logged, rendered or put into an error.
//
// Only cmd/fleet-operator and package dev import it; tests may.
package dashboard
