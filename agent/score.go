package agent

import (
	"encoding/json"
	"fmt"
)

// The PodmanV0 score as the agent reads it from its intent. It mirrors the
// CRD's fields (k8s/api/v1alpha1) without linking Kubernetes; a test in
// package k8s checks that every score the CRD accepts decodes here.

// Score is a typed workload.
type Score struct {
	Type string   `json:"type"`
	Data PodmanV0 `json:"data"`
}

// PodmanV0 is one optional init container followed by services.
type PodmanV0 struct {
	InitContainer *Service  `json:"init_container,omitempty"`
	Services      []Service `json:"services"`
}

// Service is one container.
type Service struct {
	Name            string      `json:"name"`
	Image           string      `json:"image"`
	Ports           []string    `json:"ports,omitempty"`
	Env             []EnvVar    `json:"env,omitempty"`
	SecretEnv       []SecretEnv `json:"secret_env,omitempty"`
	Volumes         []Volume    `json:"volumes,omitempty"`
	RestartPolicy   string      `json:"restart_policy,omitempty"`
	ImagePullSecret string      `json:"image_pull_secret,omitempty"`
}

// EnvVar is a plain variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SecretEnv is a variable whose value is resolved from a secret reference.
type SecretEnv struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
	Key    string `json:"key"`
}

// Volume binds a host path.
type Volume struct {
	HostPath      string `json:"host_path"`
	ContainerPath string `json:"container_path"`
	ReadOnly      bool   `json:"read_only,omitempty"`
}

// ParseScore decodes a score and checks what the agent relies on.
func ParseScore(raw json.RawMessage) (Score, error) {
	var s Score
	if err := json.Unmarshal(raw, &s); err != nil {
		return Score{}, fmt.Errorf("score: %w", err)
	}
	if s.Type != "PodmanV0" {
		return Score{}, fmt.Errorf("score.type %q: this agent runs PodmanV0 only", s.Type)
	}
	if len(s.Data.Services) == 0 {
		return Score{}, fmt.Errorf("score.data.services is empty: a PodmanV0 score needs one service or more")
	}
	if ic := s.Data.InitContainer; ic != nil && len(ic.Ports) > 0 {
		return Score{}, fmt.Errorf("score.data.init_container.ports must be empty: an init container cannot publish host ports")
	}
	return s, nil
}
