package baostandin

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// kvMount is a KV version 2 engine.
type kvMount struct {
	secrets map[string]*kvSecret // path → versions
}

type kvSecret struct {
	versions []kvVersion // versions[i] is version i+1
}

type kvVersion struct {
	data    map[string]any
	created time.Time
	deleted time.Time
}

func newKVMount() *kvMount { return &kvMount{secrets: map[string]*kvSecret{}} }

func (v kvVersion) metadata(n int) map[string]any {
	del := ""
	if !v.deleted.IsZero() {
		del = v.deleted.UTC().Format(time.RFC3339Nano)
	}
	return map[string]any{
		"created_time": v.created.UTC().Format(time.RFC3339Nano), "custom_metadata": nil,
		"deletion_time": del, "destroyed": false, "version": n,
	}
}

func (s *Server) kvOp(t *token, kv *kvMount, mount, rest, op string, body map[string]any, r *http.Request) (reply, error) {
	kind, path, _ := strings.Cut(rest, "/")
	full := mount + "/" + kind + "/" + path
	if path == "" && !(kind == "metadata" && op == "list") {
		return reply{}, fail(http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", full))
	}
	sec := kv.secrets[path]
	switch kind {
	case "data":
		switch op {
		case "read":
			if !s.can(t, full, "read") {
				return reply{}, errDenied
			}
			if sec == nil {
				return reply{}, fail(http.StatusNotFound)
			}
			n := len(sec.versions)
			if q := r.URL.Query().Get("version"); q != "" && q != "0" {
				v, err := strconv.Atoi(q)
				if err != nil || v < 1 || v > n {
					return reply{}, fail(http.StatusNotFound)
				}
				n = v
			}
			v := sec.versions[n-1]
			if !v.deleted.IsZero() {
				return reply{}, fail(http.StatusNotFound)
			}
			return reply{data: map[string]any{"data": maps.Clone(v.data), "metadata": v.metadata(n)}}, nil
		case "write":
			if !s.can(t, full, writeCap(sec != nil)) {
				return reply{}, errDenied
			}
			data, ok := body["data"].(map[string]any)
			if !ok {
				return reply{}, fail(http.StatusBadRequest, "no data provided")
			}
			if o, ok := body["options"].(map[string]any); ok {
				if c, ok := o["cas"]; ok {
					want, ok := c.(float64)
					cur := 0
					if sec != nil {
						cur = len(sec.versions)
					}
					if !ok || int(want) != cur {
						return reply{}, fail(http.StatusBadRequest, "check-and-set parameter did not match the current version")
					}
				}
			}
			if sec == nil {
				sec = &kvSecret{}
				kv.secrets[path] = sec
			}
			sec.versions = append(sec.versions, kvVersion{data: data, created: s.now()})
			n := len(sec.versions)
			return reply{data: sec.versions[n-1].metadata(n)}, nil
		case "delete":
			if !s.can(t, full, "delete") {
				return reply{}, errDenied
			}
			if sec != nil {
				sec.versions[len(sec.versions)-1].deleted = s.now()
			}
			return reply{noContent: true}, nil
		}
	case "metadata":
		switch op {
		case "list":
			if !s.can(t, strings.TrimSuffix(full, "/")+"/", "list") { // OpenBao checks a LIST with a trailing slash
				return reply{}, errDenied
			}
			prefix := path
			if prefix != "" {
				prefix += "/"
			}
			seen := map[string]bool{}
			for p := range kv.secrets {
				after, ok := strings.CutPrefix(p, prefix)
				if !ok {
					continue
				}
				if first, _, sub := strings.Cut(after, "/"); sub {
					seen[first+"/"] = true
				} else {
					seen[after] = true
				}
			}
			if len(seen) == 0 {
				return reply{}, fail(http.StatusNotFound)
			}
			keys := slices.Sorted(maps.Keys(seen))
			return reply{data: map[string]any{"keys": keys}}, nil
		case "delete":
			if !s.can(t, full, "delete") {
				return reply{}, errDenied
			}
			delete(kv.secrets, path)
			return reply{noContent: true}, nil
		}
	}
	return reply{}, fail(http.StatusMethodNotAllowed, "unsupported operation")
}
