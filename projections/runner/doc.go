// Package runner owns the one loop every projection reader of Fleet runs
// over the event streams: read each source's history to its end (catch
// up), mark it, then follow it live; skip the records that do not decode
// and hand them over to be counted, never a reason to stop; read a source
// again from after its last record when a read fails (a JetStream server
// that died, a stream electing a leader), so no record is handed over
// twice and the reader never stops on it.
//
// A Runner reads its sources, each through one ordered consumer whatever
// the number of its subject filters, and hands records, skips and
// catch-up marks to one channel, in stream order per source: Run catches
// up and follows, RunToEnd only catches up, RunOnce reads each history once
// and hands a failed read over. The folds stay with their owners: the
// operator's rollout and TaskRun runners and its Device controller's
// telemetry follow, the dashboard's read models and history consume the
// channel; this package decides nothing about what a record means.
//
// It imports only events (the read contract).
package runner
