package zitadel

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/identity/credential"
)

// Options configure a Client.
type Options struct {
	// BaseURL is the Zitadel instance (or dev provider) URL. Required.
	BaseURL string
	// Token is a personal access token allowed to manage machine users.
	// Required. Never logged.
	Token string
	// OrgID, when set, is sent as x-zitadel-orgid.
	OrgID string
	// ProjectID is the project role grants are made in. Required only to
	// create users with roles.
	ProjectID string
	// HTTPClient. Default: 30 s timeout.
	HTTPClient *http.Client
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.BaseURL == "" {
		errs = append(errs, errors.New("zitadel: BaseURL is empty"))
	} else if u, err := url.Parse(o.BaseURL); err != nil || u.Scheme == "" || u.Host == "" {
		errs = append(errs, fmt.Errorf("zitadel: BaseURL %q is not an absolute URL", o.BaseURL))
	}
	if o.Token == "" {
		errs = append(errs, errors.New("zitadel: Token is empty: give a personal access token"))
	}
	return errors.Join(errs...)
}

// Client calls the management API.
type Client struct {
	o  Options
	hc *http.Client
}

// New creates a Client.
func New(o Options) (*Client, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.BaseURL = strings.TrimRight(o.BaseURL, "/")
	c := &Client{o: o, hc: o.HTTPClient}
	if c.hc == nil {
		c.hc = &http.Client{Timeout: 30 * time.Second}
	}
	return c, nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("zitadel: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.o.BaseURL+path, body)
	if err != nil {
		return fmt.Errorf("zitadel: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.o.Token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.o.OrgID != "" {
		req.Header.Set("x-zitadel-orgid", c.o.OrgID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("zitadel: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("zitadel: %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		sentinel := ErrAPI
		if resp.StatusCode == http.StatusNotFound {
			sentinel = ErrNotFound
		}
		return &StatusError{Status: resp.StatusCode, Message: e.Message, Op: method + " " + path, err: sentinel}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("zitadel: %s %s: decode response: %w", method, path, err)
		}
	}
	return nil
}

// StatusError is an error answer of the management API.
type StatusError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the API's message.
	Message string
	// Op is the method and path.
	Op  string
	err error
}

// Error describes the failed call (status and the API's message).
func (e *StatusError) Error() string {
	return fmt.Sprintf("%v: %s: HTTP %d: %s", e.err, e.Op, e.Status, e.Message)
}

// Unwrap returns ErrAPI or ErrNotFound.
func (e *StatusError) Unwrap() error { return e.err }

// CreateMachineUser creates a machine user named name (or finds the existing
// one) and grants it roles in Options.ProjectID; it returns the user id. The
// user gets opaque (bearer) access tokens, so an access token can never pass
// the auth callout's id_token verification.
func (c *Client) CreateMachineUser(ctx context.Context, name string, roles ...string) (string, error) {
	var created struct {
		UserID string `json:"userId"`
	}
	err := c.do(ctx, http.MethodPost, "/management/v1/users/machine", map[string]any{
		"userName": name, "name": name, "description": "Harmony Fleet machine user", "accessTokenType": "ACCESS_TOKEN_TYPE_BEARER",
	}, &created)
	var se *StatusError
	switch {
	case err == nil:
	case errors.As(err, &se) && se.Status == http.StatusConflict:
		if created.UserID, err = c.findUser(ctx, name); err != nil {
			return "", err
		}
	default:
		return "", err
	}
	if len(roles) > 0 {
		if c.o.ProjectID == "" {
			return "", errors.New("zitadel: roles requested but Options.ProjectID is empty")
		}
		if err := c.do(ctx, http.MethodPost, "/management/v1/users/"+url.PathEscape(created.UserID)+"/grants", map[string]any{
			"projectId": c.o.ProjectID, "roleKeys": roles,
		}, nil); err != nil && !(errors.As(err, &se) && se.Status == http.StatusConflict) {
			return "", err
		}
	}
	return created.UserID, nil
}

func (c *Client) findUser(ctx context.Context, name string) (string, error) {
	var res struct {
		Result []struct {
			ID string `json:"id"`
		} `json:"result"`
	}
	if err := c.do(ctx, http.MethodPost, "/management/v1/users/_search", map[string]any{
		"queries": []any{map[string]any{"userNameQuery": map[string]any{"userName": name, "method": "TEXT_QUERY_METHOD_EQUALS"}}},
	}, &res); err != nil {
		return "", err
	}
	if len(res.Result) != 1 {
		return "", fmt.Errorf("%w: user %q (%d matches)", ErrNotFound, name, len(res.Result))
	}
	return res.Result[0].ID, nil
}

// AddMachineKey adds a JSON key and returns the key file Zitadel hands out
// once. Zero expires: Zitadel's maximum.
func (c *Client) AddMachineKey(ctx context.Context, userID string, expires time.Time) (credential.KeyFile, error) {
	in := map[string]any{"type": "KEY_TYPE_JSON"}
	if !expires.IsZero() {
		in["expirationDate"] = expires.UTC().Format(time.RFC3339)
	}
	var out struct {
		KeyID      string `json:"keyId"`
		KeyDetails string `json:"keyDetails"`
	}
	if err := c.do(ctx, http.MethodPost, "/management/v1/users/"+url.PathEscape(userID)+"/keys", in, &out); err != nil {
		return credential.KeyFile{}, err
	}
	raw, err := base64.StdEncoding.DecodeString(out.KeyDetails)
	if err != nil {
		return credential.KeyFile{}, fmt.Errorf("zitadel: keyDetails of key %s is not base64", out.KeyID)
	}
	kf, err := credential.ParseKeyFile(raw)
	if err != nil {
		return credential.KeyFile{}, fmt.Errorf("zitadel: key %s: %w", out.KeyID, err)
	}
	return kf, nil
}

// RemoveMachineKey removes a key.
func (c *Client) RemoveMachineKey(ctx context.Context, userID, keyID string) error {
	return c.do(ctx, http.MethodDelete, "/management/v1/users/"+url.PathEscape(userID)+"/keys/"+url.PathEscape(keyID), nil, nil)
}

// ListMachineKeys lists a user's key ids.
func (c *Client) ListMachineKeys(ctx context.Context, userID string) ([]string, error) {
	var res struct {
		Result []struct {
			ID string `json:"id"`
		} `json:"result"`
	}
	if err := c.do(ctx, http.MethodPost, "/management/v1/users/"+url.PathEscape(userID)+"/keys/_search", map[string]any{}, &res); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(res.Result))
	for _, r := range res.Result {
		ids = append(ids, r.ID)
	}
	return ids, nil
}
