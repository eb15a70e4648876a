package devop

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"
)

// managementHandler serves the subset of Zitadel's management API v1 that
// identity/zitadel uses, authenticated by Options.AdminToken. Without an
// admin token every management request is refused.
func (p *Provider) managementHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /management/v1/users/machine", p.mgmtCreateUser)
	mux.HandleFunc("POST /management/v1/users/_search", p.mgmtSearchUsers)
	mux.HandleFunc("POST /management/v1/users/{user}/grants", p.mgmtGrant)
	mux.HandleFunc("POST /management/v1/users/{user}/keys", p.mgmtAddKey)
	mux.HandleFunc("POST /management/v1/users/{user}/keys/_search", p.mgmtListKeys)
	mux.HandleFunc("DELETE /management/v1/users/{user}/keys/{key}", p.mgmtRemoveKey)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if p.adminToken == "" || !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(p.adminToken)) != 1 {
			mgmtError(w, http.StatusUnauthorized, "missing or wrong admin token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func mgmtError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": status, "message": msg})
}

func mgmtJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(v); err != nil {
		mgmtError(w, http.StatusBadRequest, "body is not the expected JSON")
		return false
	}
	return true
}

func (p *Provider) userByName(name string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.userNames[name]
	return id, ok
}

func (p *Provider) mgmtCreateUser(w http.ResponseWriter, r *http.Request) {
	var in struct {
		UserName string `json:"userName"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.UserName == "" {
		mgmtError(w, http.StatusBadRequest, "userName is empty")
		return
	}
	if _, ok := p.userByName(in.UserName); ok {
		mgmtError(w, http.StatusConflict, "user already exists")
		return
	}
	id, err := p.CreateMachineUser(r.Context(), in.UserName)
	if err != nil {
		mgmtError(w, http.StatusInternalServerError, err.Error())
		return
	}
	mgmtJSON(w, map[string]any{"userId": id, "details": map[string]any{}})
}

func (p *Provider) mgmtSearchUsers(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Queries []struct {
			UserNameQuery *struct {
				UserName string `json:"userName"`
			} `json:"userNameQuery"`
		} `json:"queries"`
	}
	if !decode(w, r, &in) {
		return
	}
	result := []map[string]string{}
	for _, q := range in.Queries {
		if q.UserNameQuery == nil {
			continue
		}
		if id, ok := p.userByName(q.UserNameQuery.UserName); ok {
			result = append(result, map[string]string{"id": id, "userName": q.UserNameQuery.UserName})
		}
	}
	mgmtJSON(w, map[string]any{"result": result})
}

func (p *Provider) mgmtGrant(w http.ResponseWriter, r *http.Request) {
	var in struct {
		ProjectID string   `json:"projectId"`
		RoleKeys  []string `json:"roleKeys"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.ProjectID != p.audience {
		mgmtError(w, http.StatusNotFound, "project not found")
		return
	}
	u, err := p.User(r.Context(), r.PathValue("user"))
	if err != nil {
		mgmtError(w, http.StatusNotFound, "user not found")
		return
	}
	roles := slices.Clone(u.Roles)
	for _, k := range in.RoleKeys {
		if !slices.Contains(roles, k) {
			roles = append(roles, k)
		}
	}
	if err := p.SetRoles(r.Context(), u.ID, roles...); err != nil {
		mgmtError(w, http.StatusNotFound, "user not found")
		return
	}
	mgmtJSON(w, map[string]any{"userGrantId": u.ID + "-" + in.ProjectID})
}

func (p *Provider) mgmtAddKey(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Type           string `json:"type"`
		ExpirationDate string `json:"expirationDate"`
	}
	if !decode(w, r, &in) {
		return
	}
	if in.Type != "KEY_TYPE_JSON" {
		mgmtError(w, http.StatusBadRequest, "type must be KEY_TYPE_JSON")
		return
	}
	var exp time.Time
	if in.ExpirationDate != "" {
		var err error
		if exp, err = time.Parse(time.RFC3339, in.ExpirationDate); err != nil {
			mgmtError(w, http.StatusBadRequest, "expirationDate is not RFC 3339")
			return
		}
	}
	kf, err := p.AddMachineKey(r.Context(), r.PathValue("user"), exp)
	if errors.Is(err, ErrUnknownUser) {
		mgmtError(w, http.StatusNotFound, "user not found")
		return
	}
	if err != nil {
		mgmtError(w, http.StatusInternalServerError, "key not created")
		return
	}
	raw, err := kf.Marshal()
	if err != nil {
		mgmtError(w, http.StatusInternalServerError, "key not encoded")
		return
	}
	mgmtJSON(w, map[string]any{"keyId": kf.KeyID, "keyDetails": base64.StdEncoding.EncodeToString(raw)})
}

func (p *Provider) mgmtListKeys(w http.ResponseWriter, r *http.Request) {
	ids, err := p.ListMachineKeys(r.Context(), r.PathValue("user"))
	if err != nil {
		mgmtError(w, http.StatusNotFound, "user not found")
		return
	}
	result := make([]map[string]string, 0, len(ids))
	for _, id := range ids {
		result = append(result, map[string]string{"id": id, "type": "KEY_TYPE_JSON"})
	}
	mgmtJSON(w, map[string]any{"result": result})
}

func (p *Provider) mgmtRemoveKey(w http.ResponseWriter, r *http.Request) {
	if err := p.RemoveMachineKey(r.Context(), r.PathValue("user"), r.PathValue("key")); err != nil {
		mgmtError(w, http.StatusNotFound, "key not found")
		return
	}
	mgmtJSON(w, map[string]any{"details": map[string]any{}})
}
