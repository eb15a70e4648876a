package updater

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"reflect"
	"regexp"
	"strings"

	"github.com/nationtech/harmony-fleet/events"
)

// ProtocolVersion is the value of Request.V this package speaks.
const ProtocolVersion = 1

// MaxRequestSize bounds a request on the socket; a longer one is refused
// unread.
const MaxRequestSize = 4 << 10

// Operations: the closed set a Request may name.
const (
	// OpSystemUpgrade runs events.TaskSystemUpgrade.
	OpSystemUpgrade = events.TaskSystemUpgrade
	// OpAgentUpgrade runs events.TaskAgentUpgrade.
	OpAgentUpgrade = events.TaskAgentUpgrade
	// OpStatus returns the record of a task id (running or done).
	OpStatus = "status"
	// OpHello is the agent saying, once connected to NATS, which version
	// it is: the health check of an agent-upgrade.
	OpHello = "hello"
)

// Request is one request on the socket, as JSON. Nothing in it is a
// command, a package name or a path.
type Request struct {
	// V is ProtocolVersion.
	V int `json:"v"`
	// ID is the task's id (the TaskRun's uid); empty for hello.
	ID string `json:"id,omitempty"`
	// Op is one of OpSystemUpgrade, OpAgentUpgrade, OpStatus, OpHello.
	Op string `json:"op"`
	// Agent is the executable of an agent-upgrade (nil otherwise).
	Agent *events.AgentArtifact `json:"agent,omitempty"`
	// Version is the agent's own version, for hello only.
	Version string `json:"version,omitempty"`
}

// Response is the answer to one request: the task's record, or an error.
type Response struct {
	ID string `json:"id,omitempty"`
	Op string `json:"op,omitempty"`
	// Phase is events.TaskRunning, TaskSucceeded or TaskFailed ("" for an
	// error about the request itself, and for hello).
	Phase string `json:"phase,omitempty"`
	// Error says why the task failed, or why the request was refused.
	Error string `json:"error,omitempty"`
	// Code classifies an error about the request itself (Phase is then
	// empty): CodeBusy, CodeInvalid, CodeRefused, CodeUnknownTask or
	// CodeInternal.
	Code string `json:"code,omitempty"`
	// Output is the end of the operation's output, at most
	// events.MaxTaskOutput bytes.
	Output string `json:"output,omitempty"`
	// Changes are the packages a system-upgrade changed.
	Changes []events.PackageChange `json:"changes,omitempty"`
	// AgentVersion is the version the agent reported after an
	// agent-upgrade (the new one, or the restored one).
	AgentVersion string `json:"agentVersion,omitempty"`
}

// Response codes of a request that did not reach a task.
const (
	// CodeBusy: another task runs.
	CodeBusy = "busy"
	// CodeInvalid: the request does not decode or is not allowed.
	CodeInvalid = "invalid"
	// CodeRefused: the peer is not the allowed user.
	CodeRefused = "refused"
	// CodeUnknownTask: no record of the task id (status only).
	CodeUnknownTask = "unknown-task"
	// CodeInternal: the updater could not serve it (its state folder).
	CodeInternal = "internal"
)

// Done reports whether the response is a finished task's.
func (r Response) Done() bool {
	return r.Phase == events.TaskSucceeded || r.Phase == events.TaskFailed
}

var (
	// idPattern: a Kubernetes uid and more, safe as a file name.
	idPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$`)
	// versionPattern: safe as a file name suffix.
	versionPattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._+~-]{0,62}[A-Za-z0-9])?$`)
	sha256Pattern  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// maxURL bounds an artifact URL.
const maxURL = 2048

// DecodeRequest reads and checks one request: at most MaxRequestSize bytes,
// one JSON object with no unknown field, no key twice and every key in
// the case of its field ("op", never "OP"), nothing after it, version
// ProtocolVersion, a known operation and the fields it needs, each
// checked (ids and versions are file-name safe, URLs http or https, sha256
// 64 lowercase hex digits). Errors wrap ErrInvalidRequest and never quote
// the input.
func DecodeRequest(r io.Reader) (Request, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxRequestSize+1))
	if err != nil {
		return Request{}, fmt.Errorf("%w: read: %w", ErrInvalidRequest, err)
	}
	if len(b) > MaxRequestSize {
		return Request{}, fmt.Errorf("%w: longer than %d bytes", ErrInvalidRequest, MaxRequestSize)
	}
	if err := checkKeys(json.NewDecoder(bytes.NewReader(b)), reflect.TypeFor[Request](), ""); err != nil {
		return Request{}, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var req Request
	if err := dec.Decode(&req); err != nil {
		return Request{}, errNotARequest
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Request{}, fmt.Errorf("%w: data after the request object", ErrInvalidRequest)
	}
	if err := req.Validate(); err != nil {
		return Request{}, err
	}
	return req, nil
}

// errNotARequest is the refusal of bytes that are not a request object
// (it never quotes them).
var errNotARequest = fmt.Errorf("%w: not a request object (unknown fields are refused)", ErrInvalidRequest)

// checkKeys reads one JSON value from dec and refuses, in every object, a
// key given twice and a key that is a field of t written in another case:
// encoding/json would let the last of two equal keys win, and match a key
// in any case. t is the Go type the value decodes into (its json tags name
// the fields); path names the value in errors ("agent"). A key that is no
// field of t is refused as unknown. Errors wrap ErrInvalidRequest and name
// only fields of t, never the input.
func checkKeys(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return errNotARequest
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if err := checkKeys(dec, elem, path); err != nil {
				return err
			}
		}
	case json.Delim('{'):
		fields := jsonFields(t)
		seen := make(map[string]bool)
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return errNotARequest
			}
			key, _ := tok.(string)
			ft, known := fields[key]
			if !known {
				for name := range fields {
					if strings.EqualFold(name, key) {
						return fmt.Errorf("%w: key %q must be written exactly so (keys are case-sensitive)", ErrInvalidRequest, path+name)
					}
				}
				return errNotARequest
			}
			if seen[key] {
				return fmt.Errorf("%w: duplicate key %q (each key may appear once)", ErrInvalidRequest, path+key)
			}
			seen[key] = true
			if err := checkKeys(dec, ft, path+key+"."); err != nil {
				return err
			}
		}
	default:
		return nil
	}
	if _, err := dec.Token(); err != nil { // the closing ] or }
		return errNotARequest
	}
	return nil
}

// jsonFields maps the JSON names of struct type t's fields to their types
// (nil for any other type).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	m := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// Validate checks a request as DecodeRequest does.
func (req Request) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, a...)...)
	}
	if req.V != ProtocolVersion {
		return bad("v must be %d", ProtocolVersion)
	}
	switch req.Op {
	case OpSystemUpgrade, OpAgentUpgrade, OpStatus:
		if !idPattern.MatchString(req.ID) {
			return bad("id must be 1 to 64 lowercase letters, digits and dashes (a TaskRun uid)")
		}
		if req.Version != "" {
			return bad("version is for hello only")
		}
	case OpHello:
		if req.ID != "" || req.Agent != nil {
			return bad("hello carries a version only")
		}
		if !versionPattern.MatchString(req.Version) {
			return bad("version must be 1 to 64 letters, digits and . _ + ~ -")
		}
		return nil
	default:
		return bad("op must be %s, %s, %s or %s", OpSystemUpgrade, OpAgentUpgrade, OpStatus, OpHello)
	}
	if req.Op != OpAgentUpgrade {
		if req.Agent != nil {
			return bad("agent is for %s only", OpAgentUpgrade)
		}
		return nil
	}
	return ValidateArtifact(req.Agent)
}

// ValidateArtifact checks an agent-upgrade's artifact: an http or https URL
// with a host, a sha256 of 64 lowercase hex digits and a file-name safe
// version. Errors wrap ErrInvalidRequest and name the field.
func ValidateArtifact(a *events.AgentArtifact) error {
	if a == nil {
		return fmt.Errorf("%w: agent-upgrade needs agent (url, sha256, version)", ErrInvalidRequest)
	}
	if len(a.URL) > maxURL {
		return fmt.Errorf("%w: agent.url is longer than %d bytes", ErrInvalidRequest, maxURL)
	}
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("%w: agent.url must be an http or https URL with a host and no user info", ErrInvalidRequest)
	}
	if !sha256Pattern.MatchString(a.SHA256) {
		return fmt.Errorf("%w: agent.sha256 must be 64 lowercase hex digits", ErrInvalidRequest)
	}
	if !versionPattern.MatchString(a.Version) {
		return fmt.Errorf("%w: agent.version must be 1 to 64 letters, digits and . _ + ~ -", ErrInvalidRequest)
	}
	return nil
}
