package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
)

// AnnotationRolloutAction is the annotation on a Deployment that asks the
// operator to pause, resume or approve the rollout of its current revision
// (ADR 0016). Its value is the JSON of a RolloutAction. The API server
// refuses a write that sets or changes it with a "by" other than the
// writer's user name, or a "generation" other than the one the Deployment
// has once the write is stored (the ValidatingAdmissionPolicy in
// k8s/config/admission); the operator records each request id once.
const AnnotationRolloutAction = "fleet.nationtech.io/rollout-action"

// RolloutActionKind is what a rollout-action request asks for.
type RolloutActionKind string

// The rollout actions.
const (
	// RolloutActionPause: no new batch starts until a resume.
	RolloutActionPause RolloutActionKind = "pause"
	// RolloutActionResume: batches start again after a pause.
	RolloutActionResume RolloutActionKind = "resume"
	// RolloutActionApprove: the batch named by Batch may start
	// (spec.rollout.approval: Manual).
	RolloutActionApprove RolloutActionKind = "approve"
)

// Limits of a rollout-action annotation.
const (
	// MaxRolloutActionBytes is the longest annotation value accepted.
	MaxRolloutActionBytes = 1024
	// MaxRolloutRequestIDLength is the longest request id.
	MaxRolloutRequestIDLength = 64
	// MaxRolloutByLength is the longest user name in "by".
	MaxRolloutByLength = 512
)

// ErrInvalidRolloutAction is wrapped by every error of ParseRolloutAction
// and RolloutAction.Validate.
var ErrInvalidRolloutAction = errors.New("invalid " + AnnotationRolloutAction + " annotation")

// RolloutAction is the value of AnnotationRolloutAction: one request to
// pause, resume or approve the rollout of one generation, by one user,
// identified by a request id that is recorded once.
//
// +kubebuilder:object:generate=false
type RolloutAction struct {
	// Action is pause, resume or approve.
	Action RolloutActionKind `json:"action"`
	// Generation is the Deployment's metadata.generation the request is
	// for: the generation of the revision whose rollout it controls, and
	// the one the Deployment has once the request is written (a request
	// counts for no other).
	Generation int64 `json:"generation"`
	// Batch is the plan batch (1-based) an approval is for; only approve
	// carries it.
	Batch int `json:"batch,omitempty"`
	// By is the user who asks: the API server's name of the writer
	// (request.userInfo.username), checked by the admission policy.
	By string `json:"by"`
	// Request is the request's unique id (a ULID from `fleet rollout`):
	// the operator records each id at most once per revision.
	Request string `json:"request"`
}

// rolloutActionFields are the JSON fields of RolloutAction, in the order
// errors list them.
var rolloutActionFields = []string{"action", "generation", "batch", "by", "request"}

// ParseRolloutAction decodes and validates an annotation value strictly:
// one JSON object with the fields of RolloutAction spelled exactly (no
// unknown, duplicate or differently cased field, nothing after the
// object), then Validate. The errors wrap ErrInvalidRolloutAction and name
// the field and the fix.
func ParseRolloutAction(value string) (RolloutAction, error) {
	var a RolloutAction
	if len(value) > MaxRolloutActionBytes {
		return a, fmt.Errorf("%w: the value has %d bytes, at most %d are accepted", ErrInvalidRolloutAction, len(value), MaxRolloutActionBytes)
	}
	dec := json.NewDecoder(strings.NewReader(value))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return a, fmt.Errorf(`%w: the value must be a JSON object such as {"action":"pause","generation":3,"by":"alice","request":"01J…"}`,
			ErrInvalidRolloutAction)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return a, fmt.Errorf("%w: not valid JSON: %v", ErrInvalidRolloutAction, err)
		}
		key, _ := tok.(string)
		if seen[key] {
			return a, fmt.Errorf("%w: field %q appears twice: give each field once", ErrInvalidRolloutAction, key)
		}
		seen[key] = true
		var target any
		switch key {
		case "action":
			target = &a.Action
		case "generation":
			target = &a.Generation
		case "batch":
			target = &a.Batch
		case "by":
			target = &a.By
		case "request":
			target = &a.Request
		default:
			return a, fmt.Errorf("%w: unknown field %q: the fields are %s (spelled exactly so)",
				ErrInvalidRolloutAction, key, strings.Join(rolloutActionFields, ", "))
		}
		if err := dec.Decode(target); err != nil {
			kind := "a string"
			if key == "generation" || key == "batch" {
				kind = "a whole number"
			}
			return a, fmt.Errorf("%w: field %q must be %s", ErrInvalidRolloutAction, key, kind)
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return a, fmt.Errorf("%w: not valid JSON: the object is not closed", ErrInvalidRolloutAction)
	}
	if _, err := dec.Token(); err != io.EOF {
		return a, fmt.Errorf("%w: the value must hold one JSON object and nothing after it", ErrInvalidRolloutAction)
	}
	if seen["batch"] && a.Batch == 0 {
		a.Batch = -1 // present but 0: refused by Validate like any batch below 1
	}
	return a, a.Validate()
}

// Validate checks a request: a known action; a generation of 1 or more; a
// batch of 1 or more for approve and none otherwise; a user name; a request
// id of letters, digits, '.', '_', ':' and '-' of at most
// MaxRolloutRequestIDLength. Errors wrap ErrInvalidRolloutAction.
func (a RolloutAction) Validate() error {
	var errs []error
	switch a.Action {
	case RolloutActionPause, RolloutActionResume, RolloutActionApprove:
	case "":
		errs = append(errs, errors.New(`field "action" is missing: set "pause", "resume" or "approve"`))
	default:
		errs = append(errs, fmt.Errorf(`field "action" is %q: set "pause", "resume" or "approve"`, a.Action))
	}
	if a.Generation < 1 {
		errs = append(errs, errors.New(`field "generation" must be the Deployment's metadata.generation (1 or more)`))
	}
	switch {
	case a.Action == RolloutActionApprove && a.Batch == 0:
		errs = append(errs, errors.New(`field "batch" is required for approve: set the number (1 or more) of the batch that waits for approval`))
	case a.Action == RolloutActionApprove && a.Batch < 1:
		errs = append(errs, errors.New(`field "batch" must be 1 or more: batches are numbered from 1`))
	case a.Action != RolloutActionApprove && a.Batch != 0:
		errs = append(errs, fmt.Errorf(`field "batch" is only for approve: remove it from a %s request`, a.Action))
	}
	switch {
	case a.By == "":
		errs = append(errs, errors.New(`field "by" is missing: set your Kubernetes user name (kubectl auth whoami)`))
	case len(a.By) > MaxRolloutByLength:
		errs = append(errs, fmt.Errorf(`field "by" is longer than %d bytes`, MaxRolloutByLength))
	case strings.ContainsFunc(a.By, unicode.IsControl):
		errs = append(errs, errors.New(`field "by" contains control characters: set your Kubernetes user name`))
	}
	switch {
	case a.Request == "":
		errs = append(errs, errors.New(`field "request" is missing: set a new unique id for each request (a ULID)`))
	case len(a.Request) > MaxRolloutRequestIDLength:
		errs = append(errs, fmt.Errorf(`field "request" is longer than %d characters: use a shorter unique id (a ULID has 26)`, MaxRolloutRequestIDLength))
	case strings.ContainsFunc(a.Request, func(r rune) bool { return !requestIDRune(r) }):
		errs = append(errs, errors.New(`field "request" may hold only letters, digits, '.', '_', ':' and '-': use a ULID`))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidRolloutAction, errors.Join(errs...))
}

func requestIDRune(r rune) bool {
	return r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("._:-", r))
}

// Encode validates a and returns the annotation value: compact JSON with
// the fields in a fixed order and no HTML escaping, so "by" appears as the
// user name itself (what the admission policy compares).
func (a RolloutAction) Encode() (string, error) {
	if err := a.Validate(); err != nil {
		return "", err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(a); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidRolloutAction, err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}
