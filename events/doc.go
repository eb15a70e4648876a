// Package events is the event contract of Harmony Fleet and its JetStream
// store. Every other package speaks it; it imports nothing from this
// repository.
//
// It owns:
//
//   - the envelope every event carries ([Event]): a ULID id that is also the
//     JetStream Nats-Msg-Id, a [Type], a schema version, a time, the subject
//     keys, an optional correlation (Deployment UID + generation) and JSON
//     data;
//   - the event type constants and their data structs. A type's name never
//     changes once shipped; incompatible data changes bump its version. The
//     catalogue is docs/events.md;
//   - subject and KV-key builders and parsers that validate every token
//     (namespace, name, device, identity subject);
//   - the KV values that are contracts between components: a device's
//     fleet-intent value ([DeviceIntent]) and the fleet-identity value
//     ([IdentityEntry]) the operator writes and the auth callout reads,
//     with its encoding and validation;
//   - idempotent provisioning of the streams and KV buckets ([Provision]),
//     with the largest report the streams devices write store
//     ([MaxReportSize]);
//   - how text a device reported is shown to people: characters that hide
//     themselves or reorder the text around them become visible escapes
//     ([Printable], [PrintableLines]);
//   - appending ([Store.Append], [Store.AppendBatch]) with dedup by ULID and
//     optimistic concurrency on the last subject sequence ([ErrConflict]);
//   - reading: replay of a subject filter from the start, a sequence or a
//     time, the last message per subject by direct get, and following live
//     (one filter, or several of one stream in one consumer, from any of
//     those starts or from the last event of each subject);
//   - decoding a stored record ([DecodeStored]): the subject it was stored
//     on is authoritative, so an envelope whose type and keys build another
//     subject (a device reporting in another's name) is refused. A record
//     that does not decode is a [*RecordError] ([ErrUndecodable]) that
//     readers skip, count on a [SkipCounter]
//     (fleet_events_skipped_records_total) and move past; it never ends a
//     read.
//
// Invariants: an event's subject is derived from its type and keys, never
// chosen by the caller, so an event cannot land on another family's subject;
// every subject family has a fixed token count and a kind token; no secret
// value is ever part of an event (data carries references only).
//
// Anyone in the module may import this package.
package events
