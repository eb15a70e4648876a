// Package baostandin is a stand-in for OpenBao: an in-memory server that
// speaks the exact subset of OpenBao's HTTP API Fleet uses, and nothing
// else. It exists because OpenBao cannot run on the machines Fleet is built
// and tested on. It is product code: `fleet dev` serves it to its users as
// their OpenBao (package dev starts it), and tests use it wherever
// production talks to OpenBao. The subset:
//
//   - POST /v1/sys/mounts/<path> with type kv and options.version 2 or
//     type transit, and
//     POST /v1/sys/auth/<path> with type jwt (enabling engines);
//   - JWT auth: POST /v1/auth/<mount>/config (oidc_discovery_url,
//     oidc_discovery_ca_pem, jwks_url, jwt_validation_pubkeys,
//     bound_issuer), POST|GET|DELETE /v1/auth/<mount>/role/<name>
//     (role_type jwt, bound_audiences, bound_subject, bound_claims,
//     bound_claims_type, user_claim, token_policies, token_ttl,
//     token_no_default_policy) and POST /v1/auth/<mount>/login, whose
//     bound_claims are matched as OpenBao matches them (every bound claim
//     present — a name with a leading "/" is a JSON pointer — and one of
//     its values, a string, a boolean or a list, equal to one bound value;
//     a refusal is 400 "error validating claims: …");
//   - POST /v1/auth/token/create (policies, ttl, no_default_policy) and
//     GET /v1/auth/token/lookup-self;
//   - ACL policies in HCL: PUT|POST|GET|DELETE /v1/sys/policies/acl/<name>,
//     enforced on every request with OpenBao's path matching (exact paths,
//     a trailing `*` glob, `+` for one segment; the most specific matching
//     path decides; deny wins) — a refused request gets 403 and
//     {"errors":["permission denied"]};
//   - KV version 2: GET|POST|PUT|DELETE /v1/<mount>/data/<path> with
//     check-and-set (options.cas) and versions, LIST|GET?list=true
//     /v1/<mount>/metadata/<path>, DELETE /v1/<mount>/metadata/<path>;
//   - transit, ecdsa-p256 keys only (image signing, ADR 0023): POST|GET
//     /v1/<mount>/keys/<name> (create with type ecdsa-p256; read returns
//     each version's public key, never private material, exportable
//     false), POST /v1/<mount>/keys/<name>/rotate, POST
//     /v1/<mount>/sign/<name>[/sha2-256] (input base64, hash_algorithm
//     sha2-256, marshaling_algorithm asn1; answers signature
//     "vault:v<N>:<base64 ASN.1>" and key_version) and GET
//     /v1/<mount>/export/… (refused: keys are not exportable). A write is
//     the update capability, as in OpenBao (no existence check).
//
// Responses use OpenBao's JSON envelope (request_id, lease_duration, data,
// auth, warnings) and its status codes, so the real client
// (github.com/openbao/openbao/api/v2) is what talks to it. Like a dev-mode
// server it starts unsealed with a root token and a KV v2 engine at
// secret/. Everything is in memory. It is not a security boundary to deploy:
// production uses a real OpenBao.
//
// Only package dev (`fleet dev`) and tests may import it; no
// production binary other than cmd/fleet links it (internal/hygiene
// checks).
package baostandin
