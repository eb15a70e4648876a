package events_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/oklog/ulid/v2"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/score"
)

// Golden event logs: testdata/golden holds, per stream, the messages a build
// of Fleet wrote (subject and exact payload, one JSON object a line). They
// are written once with -update and then only read, so every later build
// proves it still decodes what earlier builds wrote, and folds it to the same
// Deployment status and fleet-intent values (docs/events.md, "Golden logs").
//
// -update never rewrites a line: it creates the files that are missing and
// appends the lines of every (type, version) this build writes that a file
// lacks (a new type, a new schema version), and writes folds.json when it is
// missing. To pin a changed fold result on purpose, delete folds.json and
// run -update.
var update = flag.Bool("update", false, "append the golden event lines this build writes that testdata/golden lacks; write folds.json if it is missing")

const goldenDir = "testdata/golden"

// goldenFolds is the pinned result of folding the golden logs.
const goldenFolds = "folds.json"

// goldenLine is one stored message: the subject the stream stored it on and
// its payload, byte for byte.
type goldenLine struct {
	Subject string          `json:"subject"`
	Payload json.RawMessage `json:"payload"`
}

func TestGoldenLogsDecodeAndFoldToThePinnedResult(t *testing.T) {
	if *update {
		writeGolden(t)
	}
	streams := []string{events.StreamIntent, events.StreamRollout, events.StreamReports, events.StreamTelemetry, events.StreamCommands, events.StreamAudit}
	if _, err := os.Stat(goldenFile(events.StreamLiveness)); err == nil {
		streams = append(streams, events.StreamLiveness)
	}
	type typeVersion struct {
		t events.Type
		v int
	}
	seen := map[typeVersion]bool{}
	var fold []events.Event
	for _, stream := range streams {
		lines := readGolden(t, stream)
		if len(lines) == 0 {
			t.Errorf("%s has no lines", goldenFile(stream))
		}
		for i, l := range lines {
			where := fmt.Sprintf("%s line %d", goldenFile(stream), i+1)
			// Heartbeats were stored in FLEET_TELEMETRY before ADR 0024
			// moved them to FLEET_LIVENESS: those lines stay as written.
			legacyHeartbeat := stream == events.StreamTelemetry && strings.HasSuffix(l.Subject, "."+string(events.ReportHeartbeat))
			if got, err := events.StreamOf(l.Subject); !legacyHeartbeat && (err != nil || got != stream) {
				t.Errorf("%s: subject %s belongs to %s (%v), not %s", where, l.Subject, got, err, stream)
			}
			ev, err := events.DecodeStored(l.Subject, l.Payload)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if err := decodeData(ev); err != nil {
				t.Errorf("%s: the data does not decode: %v", where, err)
				continue
			}
			seen[typeVersion{ev.Type, ev.Version}] = true
			if stream != events.StreamTelemetry && stream != events.StreamLiveness && stream != events.StreamCommands && stream != events.StreamAudit && (stream != events.StreamReports || ev.Type == events.TypeWorkloadStatus) {
				fold = append(fold, ev)
			}
		}
	}
	for _, ti := range events.Catalogue() {
		if !seen[typeVersion{ti.Type, ti.Version}] {
			t.Errorf("no golden line of %s version %d, which this build writes: run go test ./events -run TestGoldenLogs -update to append it", ti.Type, ti.Version)
		}
	}

	got := foldGolden(t, fold)
	path := filepath.Join(goldenDir, goldenFolds)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the pinned fold result: %v (write it with -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("the golden logs fold to another result than %s pins (-pinned +now):\n%s", path, diff)
	}
}

// decodeData decodes an event's data into its type's struct.
func decodeData(ev events.Event) error {
	var err error
	switch ev.Type {
	case events.TypeDeploymentRevisionCreated:
		_, err = events.Decode[events.DeploymentRevisionCreated](ev)
	case events.TypeDeploymentRevisionTargets:
		_, err = events.Decode[events.DeploymentRevisionTargets](ev)
	case events.TypeDeploymentDeleted:
		_, err = events.Decode[events.DeploymentDeleted](ev)
	case events.TypeTaskRunCreated:
		_, err = events.Decode[events.TaskRunCreated](ev)
	case events.TypeTaskRunTargets:
		_, err = events.Decode[events.TaskRunTargets](ev)
	case events.TypeTaskRunDeleted:
		_, err = events.Decode[events.TaskRunDeleted](ev)
	case events.TypeDeviceHeartbeat:
		_, err = events.Decode[events.DeviceHeartbeat](ev)
	case events.TypeDeviceInventory:
		_, err = events.Decode[events.DeviceInventory](ev)
	case events.TypeWorkloadStatus:
		_, err = events.Decode[events.WorkloadStatus](ev)
	case events.TypeTaskStatus:
		_, err = events.Decode[events.TaskStatus](ev)
	case events.TypeCommandResult:
		_, err = events.Decode[events.CommandResult](ev)
	case events.TypeWorkloadDegraded, events.TypeWorkloadRecovered:
		_, err = events.Decode[events.WorkloadHealth](ev)
	case events.TypeDeviceContainers:
		_, err = events.Decode[events.DeviceContainers](ev)
	case events.TypeWorkloadFetch:
		_, err = events.Decode[events.WorkloadFetch](ev)
	case events.TypeAgentCommand:
		_, err = events.Decode[events.AgentCommand](ev)
	case events.TypeDashboardDeviceAction:
		_, err = events.Decode[events.DashboardDeviceAction](ev)
	case events.TypeDashboardAlertAcknowledged:
		_, err = events.Decode[events.DashboardAlertAcknowledged](ev)
	case events.TypeDeviceLogsRequested:
		_, err = events.Decode[events.DeviceLogsRequested](ev)
	default:
		if info, ok := ev.Type.Info(); !ok || info.Family != events.FamilyDeploymentRollout {
			return fmt.Errorf("%s: no data struct known to this test", ev.Type)
		}
		_, err = events.Decode[events.RolloutTransition](ev)
	}
	return err
}

// foldGolden folds intent, rollout and workload events as the operator's
// rollout runner does (one Rollout per Deployment, one Intent for the
// fleet) and returns every Deployment status and fleet-intent value as
// indented JSON.
func foldGolden(t *testing.T, evs []events.Event) []byte {
	t.Helper()
	// The runner reads the streams separately; the folds do not depend on
	// how they interleave. Event time is the order they were written in.
	slices.SortStableFunc(evs, func(a, b events.Event) int { return a.Time.Compare(b.Time) })
	rollouts := map[events.Keys]projections.Rollout{}
	intent := projections.NewIntent()
	// Revisions are read whole (events.RevisionAssembler): a chunked one
	// whose chunks did not all come before it is not folded.
	var chunks events.RevisionAssembler
	for _, ev := range evs {
		if info, _ := ev.Type.Info(); info.Family == events.FamilyDeploymentIntent {
			whole, ok, _ := chunks.Add(ev)
			if !ok {
				continue
			}
			ev = whole
		}
		k := ev.Keys
		if ev.Type == events.TypeWorkloadStatus {
			d, err := events.Decode[events.WorkloadStatus](ev)
			if err != nil {
				t.Fatal(err)
			}
			k = events.Keys{Namespace: d.Namespace, Name: d.Deployment}
		} else {
			intent.Apply(ev)
		}
		rollouts[k] = rollouts[k].Apply(ev)
	}
	out := map[string]json.RawMessage{}
	for _, d := range intent.Devices() {
		v, _ := intent.Value(d)
		out["fleet-intent/"+d] = v
	}
	for k, r := range rollouts {
		st, ok := r.Status()
		if !ok {
			continue
		}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		out["status/"+k.Namespace+"/"+k.Name] = b
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func goldenFile(stream string) string { return filepath.Join(goldenDir, stream+".jsonl") }

func readGolden(t *testing.T, stream string) []goldenLine {
	t.Helper()
	f, err := os.Open(goldenFile(stream))
	if err != nil {
		t.Fatalf("%v (write the golden logs with -update)", err)
	}
	defer f.Close()
	var out []goldenLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, events.MaxEventSize+4096)
	for sc.Scan() {
		var l goldenLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%s line %d: %v", goldenFile(stream), len(out)+1, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeGolden appends to each stream's file the generated lines of the
// (type, version) pairs the file lacks, creating missing files.
func writeGolden(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	byStream := map[string][]*bytes.Buffer{}
	for _, ev := range goldenStory(t) {
		m, err := events.Message(ev)
		if err != nil {
			t.Fatal(err)
		}
		stream, err := events.StreamOf(m.Subject)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		subj, _ := json.Marshal(m.Subject)
		fmt.Fprintf(&b, `{"subject":%s,"payload":%s}`+"\n", subj, m.Data)
		byStream[stream] = append(byStream[stream], &b)
	}
	for stream, lines := range byStream {
		present := map[string]bool{}
		if _, err := os.Stat(goldenFile(stream)); err == nil {
			for _, l := range readGolden(t, stream) {
				ev, err := events.DecodeStored(l.Subject, l.Payload)
				if err != nil {
					t.Fatalf("%s holds a line this build cannot decode; fix the build, never the golden log: %v", goldenFile(stream), err)
				}
				present[fmt.Sprint(ev.Type, ev.Version)] = true
			}
		}
		f, err := os.OpenFile(goldenFile(stream), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range lines {
			var l goldenLine
			_ = json.Unmarshal(b.Bytes(), &l)
			ev, _ := events.DecodeStored(l.Subject, l.Payload)
			if present[fmt.Sprint(ev.Type, ev.Version)] {
				continue
			}
			if _, err := f.Write(b.Bytes()); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// goldenStory is a small fleet's history with fixed ids and times, written
// as this build's writers write it: Deployment revisions and deletions as
// the operator builds them, rollout transitions as the runner decides them
// (projections.Rollout.Next after every fold), reports as the agent sends
// them; and the catalogue's types no component writes yet (target chunks,
// TaskRuns, task status, agent commands) with the data their structs define.
func goldenStory(t *testing.T) []events.Event {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out []events.Event
	rollouts := map[events.Keys]projections.Rollout{}
	add := func(keys events.Keys, data events.Data, opts ...events.Option) events.Event {
		at := t0.Add(time.Duration(len(out)) * 1250 * time.Millisecond)
		var id ulid.ULID
		if err := id.SetTime(ulid.Timestamp(at)); err != nil {
			t.Fatal(err)
		}
		if err := id.SetEntropy([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, byte(len(out))}); err != nil {
			t.Fatal(err)
		}
		ev, err := events.New(keys, data, append(opts, events.WithID(id), events.WithTime(at))...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
		return ev
	}
	// runner folds an intent, rollout or workload event into its
	// Deployment's rollout and appends the transitions Next decides.
	runner := func(dep events.Keys, ev events.Event) {
		r := rollouts[dep].Apply(ev)
		rollouts[dep] = r
		for _, tr := range r.NextAt(ev.Time) {
			next := add(dep, tr, events.WithCorrelation(r.UID, r.Generation))
			rollouts[dep] = rollouts[dep].Apply(next)
		}
	}
	revision := func(dep events.Keys, uid string, gen int64, s score.Score, targets, canaries []string, chunks []string) string {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(raw)
		digest := "sha256:" + hex.EncodeToString(sum[:])
		data := events.DeploymentRevisionCreated{UID: uid, Generation: gen, RevisionID: fmt.Sprintf("%d-%s", gen, digest[7:15]),
			ScoreDigest: digest, Score: raw, Targets: targets, Canaries: canaries}
		if len(chunks) > 0 {
			all := slices.Sorted(slices.Values(append(slices.Clone(targets), chunks...)))
			ts := sha256.Sum256([]byte(strings.Join(all, "\n")))
			data.TargetChunks, data.TargetsDigest = 1, "sha256:"+hex.EncodeToString(ts[:])
		}
		// The first golden logs have the chunk after its revision (an
		// order no writer uses: the fold ignores that revision); the
		// operator appends chunks first.
		ev := add(dep, data, events.WithCorrelation(uid, gen))
		if len(chunks) > 0 {
			add(dep, events.DeploymentRevisionTargets{UID: uid, Generation: gen, Chunk: 1, Targets: chunks})
		}
		runner(dep, ev)
		return data.RevisionID
	}
	workload := func(device string, dep events.Keys, uid string, gen int64, rev string, phase events.WorkloadPhase, errText string) {
		at := t0.Add(time.Duration(len(out)) * 1250 * time.Millisecond)
		ev := add(events.Keys{Device: device}, events.WorkloadStatus{Namespace: dep.Namespace, Deployment: dep.Name, UID: uid, Generation: gen,
			RevisionID: rev, Phase: phase, Error: errText, Since: at}, events.WithCorrelation(uid, gen))
		runner(dep, ev)
	}
	telemetry := func(device string) {
		add(events.Keys{Device: device}, events.DeviceHeartbeat{AgentVersion: "0.9.0", Uptime: 90*time.Second + 5*time.Millisecond})
	}

	api := events.Keys{Namespace: "lab", Name: "analysis-api"}
	const apiUID = "7c1b3e5a-0000-4000-8000-000000000001"
	apiRev := revision(api, apiUID, 1, score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{
		InitContainer: &score.Service{Name: "migrate", Image: "registry.example.com/analysis/migrate@sha256:" + strings.Repeat("1", 64), RestartPolicy: score.RestartNo},
		Services: []score.Service{{Name: "api", Image: "registry.example.com/analysis/api:v1.2.3", Ports: []string{"8080:8080", "5353:53/udp"},
			Env:           []score.EnvVar{{Name: "MODE", Value: "prod"}},
			SecretEnv:     []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/analysis/db", Key: "password"}},
			Volumes:       []score.Volume{{HostPath: "/var/lib/analysis", ContainerPath: "/data", ReadOnly: true}},
			RestartPolicy: score.RestartUnlessStopped, ImagePullSecret: "hub"}},
	}}, []string{"rpi-1", "rpi-2", "rpi-3"}, []string{"rpi-1"}, nil)
	for _, d := range []string{"rpi-1", "rpi-2", "rpi-3"} {
		telemetry(d)
	}
	add(events.Keys{Device: "rpi-1"}, events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: "6.6.51+rpt-rpi-v8",
		AgentVersion: "0.9.0", Labels: map[string]string{"site": "lab", "camera": "true"}})
	workload("rpi-1", api, apiUID, 1, apiRev, events.WorkloadApplying, "")
	workload("rpi-1", api, apiUID, 1, apiRev, events.WorkloadConverged, "")
	workload("rpi-2", api, apiUID, 1, apiRev, events.WorkloadConverged, "")
	workload("rpi-3", api, apiUID, 1, apiRev, events.WorkloadConverged, "")

	web := events.Keys{Namespace: "lab", Name: "web"}
	const webUID = "7c1b3e5a-0000-4000-8000-000000000002"
	webRev := revision(web, webUID, 2, score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{
		Services: []score.Service{{Name: "web", Image: "registry.example.com/web:v2"}}}}, []string{"rpi-2", "rpi-3"}, []string{"rpi-3"}, nil)
	workload("rpi-3", web, webUID, 2, webRev, events.WorkloadFailed, "init container migrate exited with code 3")
	ev := add(web, events.DeploymentDeleted{UID: webUID, Generation: 2}, events.WithCorrelation(webUID, 2))
	runner(web, ev)

	batch := events.Keys{Namespace: "ops", Name: "batch"}
	const batchUID = "7c1b3e5a-0000-4000-8000-000000000003"
	revision(batch, batchUID, 1, score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{
		Services: []score.Service{{Name: "batch", Image: "registry.example.com/batch:v1"}}}}, []string{"rpi-4"}, nil, []string{"rpi-5"})

	const taskUID = "7c1b3e5a-0000-4000-8000-000000000004"
	add(events.Keys{Namespace: "ops", Name: "upgrade"}, events.TaskRunCreated{UID: taskUID, Generation: 1, Task: "system-upgrade", Targets: []string{"rpi-1"}})
	add(events.Keys{Device: "rpi-1"}, events.TaskStatus{Namespace: "ops", TaskRun: "upgrade", UID: taskUID, Phase: "Succeeded", Since: t0.Add(time.Hour)})
	add(events.Keys{Namespace: "ops", Name: "upgrade"}, events.TaskRunDeleted{UID: taskUID})
	cmd := add(events.Keys{Device: "rpi-2"}, events.AgentCommand{Command: "report-inventory", RequestedBy: "admin@example.com"})
	add(events.Keys{Device: "rpi-2"}, events.CommandResult{CommandID: cmd.ID.String(), Command: "report-inventory", OK: true})
	add(events.Keys{Device: "rpi-2"}, events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: "6.6.51+rpt-rpi-v8", AgentVersion: "0.9.0"})
	telemetry("rpi-2")
	// batch's only target is quarantined mid-rollout: the runner removes
	// it from the revision's accounting, which then has no targets.
	br := rollouts[batch]
	runner(batch, add(batch, events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{UID: br.UID, Generation: br.Generation,
		RevisionID: br.RevisionID, Counts: br.Counts(), Device: "rpi-4", Error: "Device quarantined"}), events.WithCorrelation(br.UID, br.Generation)))
	// An operator quarantines rpi-4 from the dashboard, asks rpi-2 for
	// its inventory and acknowledges an alert.
	add(events.Keys{Device: "rpi-4"}, events.DashboardDeviceAction{Action: events.ActionQuarantine, Namespace: "ops", User: "ada", UserSubject: "312909075212468632"})
	cmd2 := add(events.Keys{Device: "rpi-2"}, events.AgentCommand{Command: "report-inventory", RequestedBy: "ada"})
	add(events.Keys{Device: "rpi-2"}, events.DashboardDeviceAction{Action: events.ActionCommand, Namespace: "lab", User: "ada", UserSubject: "312909075212468632",
		Command: "report-inventory", CommandID: cmd2.ID.String()})
	add(events.Keys{Name: events.AlertKey("device-stale/lab/rpi-3")}, events.DashboardAlertAcknowledged{Alert: "device-stale/lab/rpi-3", User: "ada", UserSubject: "312909075212468632"})

	// A Deployment with a rollout plan (ADR 0016): three batches, manual
	// approval, a soak, pause on failure.
	planned := events.Keys{Namespace: "lab", Name: "planned"}
	const plannedUID = "7c1b3e5a-0000-4000-8000-000000000005"
	plan := &events.RolloutPlan{Approval: events.ApprovalManual, OnFailure: events.OnFailurePause, Batches: []events.PlanBatch{
		{Size: 1, SuccessPercent: 100}, {Size: 1, SuccessPercent: 100, SoakSeconds: 5}, {Size: 2, SuccessPercent: 50}}}
	raw, _ := json.Marshal(score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "p", Image: "registry.example.com/p:v1"}}}})
	sum := sha256.Sum256(raw)
	pd := events.DeploymentRevisionCreated{UID: plannedUID, Generation: 1, RevisionID: "1-" + hex.EncodeToString(sum[:])[:8],
		ScoreDigest: "sha256:" + hex.EncodeToString(sum[:]), Score: raw, Targets: []string{"rpi-1", "rpi-2", "rpi-3", "rpi-4"},
		Canaries: []string{}, Plan: plan, TargetBatches: []int{1, 2, 3, 3}}
	runner(planned, add(planned, pd, events.WithCorrelation(plannedUID, 1)))
	control := func(typ events.Type, d events.RolloutTransition) {
		d.UID, d.Generation, d.RevisionID = plannedUID, 1, pd.RevisionID
		runner(planned, add(planned, events.NewRolloutTransition(typ, d), events.WithCorrelation(plannedUID, 1)))
	}
	control(events.TypeRolloutApproved, events.RolloutTransition{Batch: 1, By: "ada", Request: "01JF0000000000000000000001"})
	workload("rpi-1", planned, plannedUID, 1, pd.RevisionID, events.WorkloadConverged, "")
	control(events.TypeRolloutPaused, events.RolloutTransition{By: "ada", Request: "01JF0000000000000000000002"})
	control(events.TypeRolloutApproved, events.RolloutTransition{Batch: 2, By: "ada", Request: "01JF0000000000000000000003"})
	control(events.TypeRolloutResumed, events.RolloutTransition{By: "ada", Request: "01JF0000000000000000000004"})
	workload("rpi-2", planned, plannedUID, 1, pd.RevisionID, events.WorkloadConverged, "")
	for range 4 { // the soak's 5 s pass
		telemetry("rpi-2")
	}
	runner(planned, add(events.Keys{Device: "rpi-2"}, events.DeviceHeartbeat{AgentVersion: "0.9.0"}))
	control(events.TypeRolloutApproved, events.RolloutTransition{Batch: 3, By: "ada", Request: "01JF0000000000000000000005"})
	workload("rpi-3", planned, plannedUID, 1, pd.RevisionID, events.WorkloadFailed, "service p exited with code 1")
	workload("rpi-4", planned, plannedUID, 1, pd.RevisionID, events.WorkloadFailed, "service p exited with code 1")
	control(events.TypeRolloutResumed, events.RolloutTransition{By: "ada", Request: "01JF0000000000000000000006"})

	// api's generation 2 fails on its canary and is rolled back to
	// generation 1, which succeeded.
	raw2, _ := json.Marshal(score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: "registry.example.com/analysis/api:v1.3.0"}}}})
	sum2 := sha256.Sum256(raw2)
	api2 := events.DeploymentRevisionCreated{UID: apiUID, Generation: 2, RevisionID: "2-" + hex.EncodeToString(sum2[:])[:8],
		ScoreDigest: "sha256:" + hex.EncodeToString(sum2[:]), Score: raw2, Targets: []string{"rpi-1", "rpi-2", "rpi-3"}, Canaries: []string{"rpi-1"},
		Plan: &events.RolloutPlan{OnFailure: events.OnFailureRollback, Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}}}, TargetBatches: []int{0, 1, 1}}
	runner(api, add(api, api2, events.WithCorrelation(apiUID, 2)))
	workload("rpi-1", api, apiUID, 2, api2.RevisionID, events.WorkloadFailed, "service api exited with code 2")

	// After the switch (ADR 0019): api's generation 1 crash-loops on
	// rpi-2, the agent reports it degraded with the container state, and
	// it recovers.
	crashAt := t0.Add(2 * time.Hour)
	exited := crashAt.Add(-2 * time.Second)
	started := crashAt.Add(-90 * time.Second)
	add(events.Keys{Device: "rpi-2"}, events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: api.Namespace,
		Deployment: api.Name, UID: apiUID, Generation: 1, RevisionID: apiRev, Reason: events.HealthCrashLoop, Window: 300,
		Services: []events.ServiceHealth{{Name: "api", State: "exited", Restarts: 3, RestartsTotal: 12, ExitCode: 2, ExitedAt: &exited,
			Logs: []string{"starting analysis-api v1.2.3", "error: DB_PASSWORD=*** rejected", "fatal: MODE is not set"}}},
		Since: crashAt}), events.WithCorrelation(apiUID, 1))
	add(events.Keys{Device: "rpi-2"}, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: api.Namespace,
		Deployment: api.Name, UID: apiUID, Generation: 1, RevisionID: apiRev, Degraded: events.HealthCrashLoop,
		Containers: []events.ContainerState{
			{Name: "migrate", Role: events.ContainerRoleInit, State: "exited", ExitedAt: &started, ImageDigest: "sha256:" + strings.Repeat("1", 64)},
			{Name: "api", Role: events.ContainerRoleService, State: "exited", Restarts: 12, ExitCode: 137, Signal: "SIGKILL", OOMKilled: true,
				StartedAt: &started, ExitedAt: &exited, Health: "unhealthy", ImageDigest: "sha256:" + strings.Repeat("2", 64)}}}}})
	add(events.Keys{Device: "rpi-2"}, events.NewWorkloadHealth(events.TypeWorkloadRecovered, events.WorkloadHealth{Namespace: api.Namespace,
		Deployment: api.Name, UID: apiUID, Generation: 1, RevisionID: apiRev, Reason: events.HealthStable, Window: 300,
		Services: []events.ServiceHealth{{Name: "api", State: "running", RestartsTotal: 12, ExitCode: 2, ExitedAt: &exited}},
		Since:    crashAt.Add(5 * time.Minute)}), events.WithCorrelation(apiUID, 1))

	// A fleet-wide TaskRun whose targets are chunked (ADR 0010): the
	// chunk first, the creation last, naming it.
	fleetWide := events.Keys{Namespace: "ops", Name: "fleet-upgrade"}
	const fleetWideUID = "7c1b3e5a-0000-4000-8000-000000000006"
	add(fleetWide, events.TaskRunTargets{UID: fleetWideUID, Generation: 1, Chunk: 1, Targets: []string{"rpi-1", "rpi-2"}},
		events.WithCorrelation(fleetWideUID, 1))
	add(fleetWide, events.TaskRunCreated{UID: fleetWideUID, Generation: 1, Task: "system-upgrade", Targets: []string{},
		TargetChunks: 1, TargetsDigest: events.TargetsDigest([]string{"rpi-1", "rpi-2"})}, events.WithCorrelation(fleetWideUID, 1))

	// ADR 0025: ada reads api's log on rpi-2 with fleet logs (the command
	// carries the request; the audit names her), and grace is refused.
	logs := &events.LogsRequest{Reader: "0123456789abcdef0123456789abcdef", Request: "fedcba9876543210fedcba9876543210",
		Namespace: "lab", Deployment: "api", Service: "api", Tail: 100, Follow: true, FollowSeconds: 1800}
	add(events.Keys{Device: "rpi-2"}, events.DeviceLogsRequested{Namespace: "lab", Deployment: "api", Service: "api", User: "ada",
		Via: events.ViaCLI, Request: logs.Request, Tail: 100, Follow: true, Allowed: true})
	add(events.Keys{Device: "rpi-2"}, events.AgentCommand{Command: events.CommandLogs, RequestedBy: "ada", Logs: logs})
	add(events.Keys{Device: "rpi-2"}, events.DeviceLogsRequested{Namespace: "lab", Deployment: "api", Service: "api", User: "grace",
		Via: events.ViaCLI, Request: "00000000000000000000000000000001", Since: crashAt, Allowed: false,
		Reason: "RBAC: grace may not get devices/log in namespace lab"})

	// A Follow Deployment (spec.rollout.targets Follow, ADR 0026): rpi-8
	// is its frozen target; after the rollout succeeded rpi-9 enrolls and
	// joins, rpi-10 is relabelled into it, and rpi-9 is relabelled out
	// of it and loses it. New devices, so the pinned values of the others
	// stay as they were.
	follow := events.Keys{Namespace: "lab", Name: "follow"}
	const followUID = "7c1b3e5a-0000-4000-8000-000000000007"
	raw3, _ := json.Marshal(score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "probe", Image: "registry.example.com/probe:v1"}}}})
	sum3 := sha256.Sum256(raw3)
	fd := events.DeploymentRevisionCreated{UID: followUID, Generation: 1, RevisionID: "1-" + hex.EncodeToString(sum3[:])[:8],
		ScoreDigest: "sha256:" + hex.EncodeToString(sum3[:]), Score: raw3, Targets: []string{"rpi-8"}, Canaries: []string{}, Follow: true}
	runner(follow, add(follow, fd, events.WithCorrelation(followUID, 1)))
	workload("rpi-8", follow, followUID, 1, fd.RevisionID, events.WorkloadConverged, "")
	member := func(typ events.Type, d events.RolloutTransition) {
		r := rollouts[follow]
		d.UID, d.Generation, d.RevisionID, d.Counts, d.Follow = followUID, 1, fd.RevisionID, r.Counts(), true
		runner(follow, add(follow, events.NewRolloutTransition(typ, d), events.WithCorrelation(followUID, 1)))
	}
	member(events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "rpi-9", Reason: "Device created", Change: "site=lab"})
	workload("rpi-9", follow, followUID, 1, fd.RevisionID, events.WorkloadConverged, "")
	member(events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "rpi-10", Reason: "labels changed", Change: "site=lab (was site unset)"})
	member(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "rpi-9",
		Error: "labels no longer match the target selector: site=lyon (was site=lab)", Change: "site=lyon (was site=lab)"})

	// A fetch ahead of the release (ADR 0027): rpi-2 pulls generation 1's
	// images before the rollout hands it the revision.
	fetchEnd := crashAt.Add(10 * time.Minute)
	add(events.Keys{Device: "rpi-2"}, events.WorkloadFetch{Namespace: api.Namespace, Deployment: api.Name, UID: apiUID, Generation: 1,
		RevisionID: apiRev, Phase: events.FetchDone, Images: 2, Pulled: 1, Started: crashAt.Add(9 * time.Minute), Ended: &fetchEnd},
		events.WithCorrelation(apiUID, 1))

	// A Follow Deployment whose generation 2 failed (ADR 0026): rpi-12
	// enrolls after the failure and is handed generation 1, the last
	// whose rollout succeeded. New devices and a new Deployment.
	back := events.Keys{Namespace: "lab", Name: "follow-back"}
	const backUID = "7c1b3e5a-0000-4000-8000-000000000008"
	var backRevs []string
	for gen := int64(1); gen <= 2; gen++ {
		raw, _ := json.Marshal(score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "probe",
			Image: fmt.Sprintf("registry.example.com/probe:v%d", gen)}}}})
		sum := sha256.Sum256(raw)
		bd := events.DeploymentRevisionCreated{UID: backUID, Generation: gen, RevisionID: fmt.Sprintf("%d-%s", gen, hex.EncodeToString(sum[:])[:8]),
			ScoreDigest: "sha256:" + hex.EncodeToString(sum[:]), Score: raw, Targets: []string{"rpi-11"}, Canaries: []string{}, Follow: true}
		backRevs = append(backRevs, bd.RevisionID)
		runner(back, add(back, bd, events.WithCorrelation(backUID, gen)))
		if gen == 1 {
			workload("rpi-11", back, backUID, 1, bd.RevisionID, events.WorkloadConverged, "")
		} else {
			workload("rpi-11", back, backUID, 2, bd.RevisionID, events.WorkloadFailed, "image pull failed: manifest unknown")
		}
	}
	r := rollouts[back]
	runner(back, add(back, events.NewRolloutTransition(events.TypeRolloutTargetAdded, events.RolloutTransition{UID: backUID, Generation: 2,
		RevisionID: backRevs[1], Counts: r.Counts(), Device: "rpi-12", Follow: true, Reason: "Device created", Change: "site=lab",
		HandedGeneration: 1, HandedRevisionID: backRevs[0]}), events.WithCorrelation(backUID, 2)))
	workload("rpi-12", back, backUID, 1, backRevs[0], events.WorkloadConverged, "")

	// A Follow Deployment with a plan and a disruption budget (ADR 0026):
	// rpi-14 enrolls after the rollout succeeded, joins the last batch in
	// budget group lab, and a budget wave hands it the revision.
	fplan := events.Keys{Namespace: "lab", Name: "follow-plan"}
	const fplanUID = "7c1b3e5a-0000-4000-8000-000000000009"
	raw4, _ := json.Marshal(score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "probe", Image: "registry.example.com/probe:v4"}}}})
	sum4 := sha256.Sum256(raw4)
	fpd := events.DeploymentRevisionCreated{UID: fplanUID, Generation: 1, RevisionID: "1-" + hex.EncodeToString(sum4[:])[:8],
		ScoreDigest: "sha256:" + hex.EncodeToString(sum4[:]), Score: raw4, Targets: []string{"rpi-13"}, Canaries: []string{}, Follow: true,
		Plan: &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 1, SuccessPercent: 100}},
			Budget: &events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 1, Values: []string{"lab"}}},
		TargetBatches: []int{1}, TargetGroups: []int{0}}
	runner(fplan, add(fplan, fpd, events.WithCorrelation(fplanUID, 1)))
	workload("rpi-13", fplan, fplanUID, 1, fpd.RevisionID, events.WorkloadConverged, "")
	fpr := rollouts[fplan]
	runner(fplan, add(fplan, events.NewRolloutTransition(events.TypeRolloutTargetAdded, events.RolloutTransition{UID: fplanUID, Generation: 1,
		RevisionID: fpd.RevisionID, Counts: fpr.Counts(), Device: "rpi-14", Follow: true, Reason: "Device created", Change: "site=lab",
		Batch: 1, BudgetGroup: "lab"}), events.WithCorrelation(fplanUID, 1)))
	workload("rpi-14", fplan, fplanUID, 1, fpd.RevisionID, events.WorkloadConverged, "")
	return out
}
