package dev

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestBinDirLinksTheBinariesThePrintedStepsCall checks <data>/bin: the
// links fleet dev makes for fleet, kubectl and the nats CLI, their
// replacement on the next start, where the nats CLI is looked for, and the
// printed PATH line and missing-CLI note.
func TestBinDirLinksTheBinariesThePrintedStepsCall(t *testing.T) {
	// tree is a fake repository and the binaries' folders, made per case.
	type tree struct {
		root, fleet, kubectl, repoNATS, envNATS, pathNATS, data string
	}
	for _, tc := range []struct {
		name string
		// setup prepares the tree (built binaries, earlier links) and
		// returns the search for the nats CLI.
		setup func(t *testing.T, tr tree) natsSearch
		// want maps each link name to its wanted target ("" for none).
		want func(tr tree) map[string]string
		// printed must appear in the usage text; absent must not.
		printed, absent func(tr tree) []string
	}{
		{
			name: "a new data folder gets links to fleet, kubectl and the repository's nats CLI",
			setup: func(t *testing.T, tr tree) natsSearch {
				executable(t, tr.repoNATS)
				executable(t, tr.pathNATS)
				return natsSearch{repoRoot: tr.root, lookPath: exec.LookPath}
			},
			want: func(tr tree) map[string]string {
				return map[string]string{"fleet": tr.fleet, "kubectl": tr.kubectl, "nats": tr.repoNATS}
			},
			printed: func(tr tree) []string {
				return []string{"Put fleet, kubectl and the nats CLI on PATH (links in " + filepath.Join(tr.data, "bin") + ", remade every start):\n" +
					`  export PATH="` + filepath.Join(tr.data, "bin") + `:$PATH"` + "\n\nPoint kubectl at it:\n"}
			},
			absent: func(tree) []string { return []string{SetupNATSCLICommand} },
		},
		{
			name: "links an earlier run left to other binaries are replaced",
			setup: func(t *testing.T, tr tree) natsSearch {
				executable(t, tr.envNATS)
				bin := filepath.Join(tr.data, "bin")
				old := filepath.Join(tr.root, "old")
				executable(t, old)
				for _, n := range []string{"fleet", "kubectl", "nats", "nats.new"} {
					mustLink(t, old, filepath.Join(bin, n))
				}
				return natsSearch{env: tr.envNATS, repoRoot: tr.root, lookPath: exec.LookPath}
			},
			want: func(tr tree) map[string]string {
				return map[string]string{"fleet": tr.fleet, "kubectl": tr.kubectl, "nats": tr.envNATS}
			},
		},
		{
			name: "the flag comes before the variable, and a nats CLI found through the bin folder's own link is followed to its file",
			setup: func(t *testing.T, tr tree) natsSearch {
				executable(t, tr.pathNATS)
				executable(t, tr.envNATS)
				mustLink(t, tr.pathNATS, filepath.Join(tr.data, "bin", "nats"))
				return natsSearch{flag: filepath.Join(tr.data, "bin", "nats"), env: tr.envNATS, lookPath: exec.LookPath}
			},
			want: func(tr tree) map[string]string {
				return map[string]string{"fleet": tr.fleet, "kubectl": tr.kubectl, "nats": tr.pathNATS}
			},
		},
		{
			name: "without the repository's nats CLI the one on PATH is linked",
			setup: func(t *testing.T, tr tree) natsSearch {
				executable(t, tr.pathNATS)
				t.Setenv("PATH", filepath.Dir(tr.pathNATS))
				return natsSearch{repoRoot: tr.root, lookPath: exec.LookPath}
			},
			want: func(tr tree) map[string]string {
				return map[string]string{"fleet": tr.fleet, "kubectl": tr.kubectl, "nats": tr.pathNATS}
			},
		},
		{
			name: "with no nats CLI anywhere the earlier nats link is removed and the text says how to build it",
			setup: func(t *testing.T, tr tree) natsSearch {
				t.Setenv("PATH", t.TempDir())
				executable(t, tr.pathNATS)
				mustLink(t, tr.pathNATS, filepath.Join(tr.data, "bin", "nats"))
				return natsSearch{repoRoot: tr.root, lookPath: exec.LookPath}
			},
			want: func(tr tree) map[string]string {
				return map[string]string{"fleet": tr.fleet, "kubectl": tr.kubectl, "nats": ""}
			},
			printed: func(tr tree) []string {
				return []string{
					"Put fleet and kubectl on PATH (links in " + filepath.Join(tr.data, "bin") + ", remade every start; no nats CLI, see below):\n" +
						`  export PATH="` + filepath.Join(tr.data, "bin") + `:$PATH"` + "\n",
					"no nats CLI found (none at " + tr.repoNATS + ", none on PATH), step 3 needs it",
					"#   go tool -modfile=tools/go.mod task setup:natscli\n",
					"3. nats sub --stream FLEET_ROLLOUT", "4. fleet history deployment lab/analysis-api",
				}
			},
		},
		{
			name: "a --nats-cli that is not an executable file is reported, not replaced by another CLI",
			setup: func(t *testing.T, tr tree) natsSearch {
				executable(t, tr.repoNATS)
				return natsSearch{flag: filepath.Join(tr.root, "missing", "nats"), repoRoot: tr.root, lookPath: exec.LookPath}
			},
			want: func(tr tree) map[string]string {
				return map[string]string{"fleet": tr.fleet, "kubectl": tr.kubectl, "nats": ""}
			},
			printed: func(tr tree) []string {
				return []string{"no nats CLI found (--nats-cli " + filepath.Join(tr.root, "missing", "nats") + ": ", SetupNATSCLICommand}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := filepath.EvalSymlinks(t.TempDir()) // the links point at real files
			if err != nil {
				t.Fatal(err)
			}
			tr := tree{
				root: root, fleet: filepath.Join(root, "build", "fleet"), kubectl: filepath.Join(root, "k8s", "kubectl"),
				repoNATS: filepath.Join(root, repoNATSCLI), envNATS: filepath.Join(root, "env", "nats"),
				pathNATS: filepath.Join(root, "path", "nats"), data: filepath.Join(root, "data"),
			}
			executable(t, tr.fleet)
			executable(t, tr.kubectl)
			b, err := makeBinDir(tr.data, tr.fleet, tr.kubectl, tc.setup(t, tr))
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(tr.data, "bin"); b.path != want {
				t.Errorf("bin folder %s, want %s", b.path, want)
			}
			for name, want := range tc.want(tr) {
				got, err := os.Readlink(filepath.Join(b.path, name))
				switch {
				case want == "" && err == nil:
					t.Errorf("%s links to %s, want no link", name, got)
				case want != "" && (err != nil || got != want):
					t.Errorf("%s links to %q (%v), want %s", name, got, err, want)
				}
			}
			if want := tc.want(tr)["nats"]; b.nats != want || (want == "") != (b.natsMissing != "") {
				t.Errorf("nats CLI %q (missing %q), want %q", b.nats, b.natsMissing, want)
			}
			entries, err := os.ReadDir(b.path)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if _, ok := tc.want(tr)[e.Name()]; !ok {
					t.Errorf("the bin folder holds %s besides the links", e.Name())
				}
			}
			var out bytes.Buffer
			printUsage(&out, tr.data, Info{Namespace: "lab", BinDir: b.path, NATSCLI: b.nats, NATSCLIMissing: b.natsMissing}, "")
			var printed, absent []string
			if tc.printed != nil {
				printed = tc.printed(tr)
			}
			if tc.absent != nil {
				absent = tc.absent(tr)
			}
			for _, want := range printed {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the printed text lacks %q:\n%s", want, out.String())
				}
			}
			for _, not := range absent {
				if strings.Contains(out.String(), not) {
					t.Errorf("the printed text has %q:\n%s", not, out.String())
				}
			}
		})
	}
}

// executable writes an executable file at path.
func executable(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o700); err != nil {
		t.Fatal(err)
	}
}

// mustLink makes a symbolic link at path to target.
func mustLink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}
