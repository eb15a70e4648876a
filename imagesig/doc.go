// Package imagesig owns Fleet's image signatures (ADR 0023): sigstore
// "simple signing" signatures stored in the registry as sigstore
// attachments (the cosign layout, tag sha256-<hex>.sig), made by `harmony
// ship` (Sign) and checked by the agent before any container of a revision
// is created (Verifier). Both go through containers/image's own signing
// and policy code; nothing of the format is re-implemented here. Sign
// takes a key file, or a PayloadSigner whose key is elsewhere (OpenBao
// transit): containers/image then still builds the payload and writes the
// attachment, and only the signature is made remotely (remote.go says
// how). The trust policy's keys (parsing, checking, ids) are in
// imagesig/sigkeys.
//
// Invariants: the registry is the adversary. A signature is accepted only
// when it verifies under one of the caller's public keys and its signed
// payload names the digest the caller passes (the one the device's engine
// pulled) and the image's repository; nothing the registry says widens
// that. No private key, passphrase or registry password appears in an
// error or a log; errors quote nothing the registry sent but a bounded,
// single-line reason. It imports nothing of the module, so the agent and
// the CI shipper may both link it.
package imagesig
