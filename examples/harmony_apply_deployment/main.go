// Command harmony is the reference deployment program of a two-service
// application: it builds a frontend and a backend image and ships them to
// Fleet together, as one Deployment and one rollout revision. A real
// application keeps a program like this in its own repository (see
// docs/ci.md); its binary is named harmony:
//
//	go build -tags containers_image_openpgp -o harmony ./examples/harmony_apply_deployment
//	./harmony ship --context production --tag "$CI_COMMIT_SHA" --wait
//
// Against a running `fleet dev`, use the context "dev" and the commands
// fleet dev prints (docs/fleet.md, "Ship from a laptop as CI would").
//
// Run it from this folder: build contexts are relative to the working
// directory.
//
// The Dockerfiles start FROM localhost/fleet-base:latest, the offline test
// base: busybox, loaded into local storage by `task setup:podman` so that
// nothing is pulled from the internet. It exists only on test machines: a
// real application starts from a public base image pinned by digest (FROM
// docker.io/library/busybox:1.37@sha256:<digest>), so every runner builds
// the same digests (see docs/ci.md, Limits).
package main

import "github.com/nationtech/harmony-fleet/harmony"

// Coordinates of the "dev" context: a running `fleet dev` on this machine
// (docs/fleet.md, "Ship from a laptop as CI would"). The defaults are the
// addresses fleet dev takes when they are free (package dev
// DefaultShip*); when one was taken, fleet dev prints the go build command
// with -ldflags -X main.devZitadel=… (and the others) that compiles this
// run's addresses in.
var (
	devZitadel   = "http://127.0.0.1:8180"
	devOpenBao   = "http://127.0.0.1:8200"
	devRegistry  = "127.0.0.1:5000"
	devNamespace = "lab"
)

// Coordinates of the "local" context (fleet dev and the end-to-end test).
// They are compiled in like every context; the test sets them at link time
// (-ldflags -X main.localOpenBao=… -X main.localZitadel=… -X
// main.localRegistry=…) because its servers listen on free ports.
var (
	localOpenBao  = "http://127.0.0.1:8200"
	localZitadel  = "http://127.0.0.1:8080"
	localRegistry = "127.0.0.1:5000"
)

// app is the application's stable build and deployment policy.
type app struct{}

func (app) Images() []harmony.Image {
	return []harmony.Image{
		{Name: "frontend", Context: "frontend"},
		{Name: "backend", Context: "backend"},
	}
}

func (app) Contexts() []harmony.Context {
	return []harmony.Context{
		{
			Name:       "production",
			Namespace:  "example",
			Registry:   "hub.nationtech.io",
			Repository: "example",
			OpenBao:    harmony.OpenBao{URL: "https://bao.nationtech.io", Role: "example-ci"},
			Zitadel:    harmony.Zitadel{URL: "https://auth.nationtech.io", ProjectID: "harmony-fleet"},
		},
		{
			Name:       "local",
			Namespace:  "example",
			Registry:   localRegistry,
			Repository: "example",
			OpenBao:    harmony.OpenBao{URL: localOpenBao, Role: "example-ci"},
			Zitadel:    harmony.Zitadel{URL: localZitadel, ProjectID: "harmony-fleet"},
		},
		{
			// fleet dev: every device of its namespace is in group
			// example-edge and labelled app=example.
			Name:       "dev",
			Namespace:  devNamespace,
			Registry:   devRegistry,
			Repository: "example",
			OpenBao:    harmony.OpenBao{URL: devOpenBao, Role: "harmony-ci"},
			Zitadel:    harmony.Zitadel{URL: devZitadel, ProjectID: "harmony-fleet"},
			// fleet dev makes this transit key in its OpenBao stand-in:
			// ship signs every image through transit, and the Deployment
			// trusts that key's versions only (docs/ci.md, "Signing
			// images").
			Signing: &harmony.Signing{TransitKey: "harmony-" + devNamespace + "-dev"},
		},
	}
}

// Deployment publishes no host port: the end-to-end test runs two devices
// on one machine, and host ports are machine-wide. A real frontend would
// add Ports: []string{"8080:8080"}.
//
// The services do not talk to each other. On a device each one is a
// container on Podman's default network, which has no DNS: a container
// name such as example-backend does not resolve in another container. A
// real frontend that calls its backend publishes the backend on a host
// port (Ports: []string{"9090:9090"} on example-backend) and reaches it
// through the host, at http://host.containers.internal:9090 (Podman writes
// that name into every container's /etc/hosts).
// exampleData is the host folder both the migration and the backend mount
// at /data: under /var/tmp, which every user may create folders in, so the
// agent of a fleet dev run by a normal user (rootless Podman) creates it as
// it does examples/analysis-api.yaml's. On a device under the systemd unit,
// whose /var/tmp is private, use /var/lib/fleet-workloads/harmony-example
// instead (docs/agent.md, "Host paths").
const exampleData = "/var/tmp/harmony-example"

func (app) Deployment() harmony.Deployment {
	return harmony.Deployment{
		Name:          "example",
		AllowedGroups: []string{"example-edge"},
		Placement:     map[string]string{"app": "example"},
		// The backend image migrates its data when asked to, then exits;
		// every revision runs it once before the services start.
		Init: &harmony.Service{
			Name:            "example-migrate",
			Image:           "backend",
			Env:             []harmony.EnvVar{{Name: "EXAMPLE_ROLE", Value: "migrate"}},
			ImagePullSecret: "example-pull",
			Volumes:         []harmony.Volume{{HostPath: exampleData, ContainerPath: "/data"}},
		},
		Services: []harmony.Service{
			{
				Name:            "example-frontend",
				Image:           "frontend",
				ImagePullSecret: "example-pull",
			},
			{
				Name:            "example-backend",
				Image:           "backend",
				Env:             []harmony.EnvVar{{Name: "EXAMPLE_ROLE", Value: "serve"}},
				SecretEnv:       []harmony.SecretEnv{{Name: "API_TOKEN", Secret: "example/backend", Key: "api_token"}},
				ImagePullSecret: "example-pull",
				Volumes:         []harmony.Volume{{HostPath: exampleData, ContainerPath: "/data"}},
			},
		},
	}
}

func main() { harmony.Main(app{}) }
