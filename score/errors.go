package score

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalid is wrapped by every error about a score, or a part of one, that
// breaks a rule: a *FieldError, and the *ValidationError of Validate.
var ErrInvalid = errors.New("invalid PodmanV0 score")

// FieldError is one broken rule: the field, by its JSON path (for example
// score.data.services[0].ports[1]), the offending value when it is short
// enough to repeat, and the rule phrased as the fix.
type FieldError struct {
	// Field is the JSON path of the field.
	Field string
	// Value is the offending value, quoted in the message (at most 100
	// characters of it); empty when the rule is about the field's size or
	// presence, or the value is empty.
	Value string
	// Fix says what to write instead.
	Fix string
}

// maxQuoted is how much of a value an error message repeats.
const maxQuoted = 100

// Error implements error.
func (e *FieldError) Error() string {
	if e.Value == "" {
		return e.Field + ": " + e.Fix
	}
	v := e.Value
	if r := []rune(v); len(r) > maxQuoted {
		v = string(r[:maxQuoted]) + "…"
	}
	return e.Field + " " + strconv.Quote(v) + ": " + e.Fix
}

// Unwrap lets errors.Is match ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// ValidationError is every rule a score breaks, in field order.
type ValidationError struct {
	Fields []*FieldError
}

// Error implements error: the rules on one line, separated by "; ".
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return fmt.Sprintf("%s: %s", ErrInvalid, strings.Join(parts, "; "))
}

// Unwrap lets errors.Is match ErrInvalid and errors.As find each
// *FieldError.
func (e *ValidationError) Unwrap() []error {
	out := make([]error, 0, len(e.Fields)+1)
	out = append(out, ErrInvalid)
	for _, f := range e.Fields {
		out = append(out, f)
	}
	return out
}
