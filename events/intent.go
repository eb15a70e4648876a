package events

import "encoding/json"

// DeviceIntent is the value of a device's fleet-intent KV key: everything the
// device must run, one entry per (namespace, Deployment), sorted by
// namespace then name. The operator's projection writes it; the agent reads
// it. Secret values are never part of it: scores carry references only.
type DeviceIntent struct {
	Device      string        `json:"device"`
	Deployments []IntentEntry `json:"deployments"`
}

// IntentEntry is one Deployment revision a device must run.
type IntentEntry struct {
	Namespace   string          `json:"namespace"`
	Name        string          `json:"name"`
	UID         string          `json:"uid"`
	Generation  int64           `json:"generation"`
	RevisionID  string          `json:"revisionId"`
	ScoreDigest string          `json:"scoreDigest"`
	Score       json.RawMessage `json:"score"`
}
