// Package kvstore holds what the operator's roles share about JetStream
// key-value writes: whether a conditional write lost against another
// writer (Conflict). Imported by the roles of the operator only.
package kvstore

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Conflict reports whether a conditional write lost against another
// writer: the key's revision was not the one expected. A single-replica
// stream answers with code 10071, a replicated one with 10164.
func Conflict(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}
