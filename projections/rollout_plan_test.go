package projections_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// model is a brute-force reading of the plan's rules (ADR 0016): it keeps
// only the inputs (results, pauses, approvals, the transitions decided)
// and counts everything again from them at every decision.
type model struct {
	plan    events.RolloutPlan
	targets []string
	canary  map[string]bool
	batchOf map[string]int
	removed map[string]bool
	results map[string]events.WorkloadPhase

	paused      bool
	approved    map[int]bool
	awaiting    int
	started     bool
	canaryStage bool // canary-stage appended
	canariesOK  bool
	batch       int
	soaking     map[int]time.Time
	done        map[int]string // "succeeded" or "failed"
	terminal    string
	// handed are the devices handed the revision: a removal takes nothing
	// back.
	handed map[string]bool
	// With a budget: each target's group, and the batch devices handed.
	groupOf     map[string]int
	batchHanded map[string]bool
	// prior: an earlier generation succeeded, rollbackTo the greatest
	// such; rolledBack are the devices a rollback handed it back to.
	prior      bool
	rollbackTo int64
	rolledBack map[string]bool
}

// fail ends the rollout after a failure: a rollback when asked and
// possible, then rollout.failed.
func (m *model) fail(emit func(events.Type)) {
	if m.plan.OnFailure == events.OnFailureRollback && m.prior {
		emit(events.TypeRolloutRolledBack)
		for _, d := range m.released() {
			m.rolledBack[d] = true
		}
	}
	emit(events.TypeRolloutFailed)
	m.terminal = "failed"
}

// wave is the budget's next wave of batch b, counted from scratch.
func (m *model) wave(b int) []string {
	bud := m.plan.Budget
	size, inflight := map[int]int{}, map[int]int{}
	for _, d := range m.targets {
		if m.removed[d] {
			continue
		}
		size[m.groupOf[d]]++
		if m.batchHanded[d] && m.results[d] != events.WorkloadConverged && m.results[d] != events.WorkloadFailed {
			inflight[m.groupOf[d]]++
		}
	}
	var out []string
	for _, d := range m.targets {
		if m.removed[d] || m.canary[d] || m.batchOf[d] != b || m.batchHanded[d] {
			continue
		}
		g := m.groupOf[d]
		allowed := bud.MaxUnavailable
		if bud.MaxPercent > 0 {
			allowed = size[g] * bud.MaxPercent / 100
		}
		if allowed < 1 {
			allowed = 1
		}
		if inflight[g] < allowed {
			inflight[g]++
			out = append(out, d)
		}
	}
	return out
}

func (m *model) unhanded(b int) int {
	n := 0
	for _, d := range m.targets {
		if !m.removed[d] && !m.canary[d] && m.batchOf[d] == b && !m.batchHanded[d] {
			n++
		}
	}
	return n
}

func (m *model) handWave(w []string) {
	for _, d := range w {
		m.batchHanded[d], m.handed[d] = true, true
	}
}

func (m *model) hand(canaries bool, batch int) {
	for _, d := range m.targets {
		if !m.removed[d] && ((canaries && m.canary[d]) || (!canaries && !m.canary[d] && m.batchOf[d] == batch)) {
			m.handed[d] = true
		}
	}
}

func (m *model) members(b int) (n, conv, failed int) {
	for _, d := range m.targets {
		if m.removed[d] || m.canary[d] || m.batchOf[d] != b {
			continue
		}
		n++
		switch m.results[d] {
		case events.WorkloadConverged:
			conv++
		case events.WorkloadFailed:
			failed++
		}
	}
	return
}

func (m *model) live() (targets, canaries int) {
	for _, d := range m.targets {
		if !m.removed[d] {
			targets++
			if m.canary[d] {
				canaries++
			}
		}
	}
	return
}

// decide returns the transition types the rules call for at now, and
// records them as appended; like the runner, it decides again until
// nothing is left to decide.
func (m *model) decide(now time.Time) []events.Type {
	var out []events.Type
	for range 20 {
		next := m.decideOnce(now)
		if len(next) == 0 {
			break
		}
		out = append(out, next...)
	}
	return out
}

func (m *model) decideOnce(now time.Time) []events.Type {
	var out []events.Type
	emit := func(t events.Type) { out = append(out, t) }
	if m.terminal != "" {
		return nil
	}
	if !m.started {
		emit(events.TypeRolloutStarted)
		m.started = true
	}
	targets, canaries := m.live()
	if targets == 0 {
		emit(events.TypeRolloutFailed)
		m.terminal = "failed"
		return out
	}
	hasCanaries := false
	for _, d := range m.targets {
		hasCanaries = hasCanaries || m.canary[d]
	}
	if hasCanaries && !m.canariesOK {
		if !m.canaryStage {
			if m.paused {
				return out
			}
			emit(events.TypeRolloutCanaryStage)
			m.canaryStage = true
			m.hand(true, 0)
		}
		failed, conv := 0, 0
		for _, d := range m.targets {
			if m.canary[d] && !m.removed[d] {
				switch m.results[d] {
				case events.WorkloadFailed:
					failed++
				case events.WorkloadConverged:
					conv++
				}
			}
		}
		if canaries == 0 {
			emit(events.TypeRolloutCanaryFailed)
			emit(events.TypeRolloutFailed)
			m.terminal = "failed"
			return out
		}
		if failed > 0 {
			emit(events.TypeRolloutCanaryFailed)
			m.fail(emit)
			return out
		}
		if conv < canaries {
			return out
		}
		emit(events.TypeRolloutCanariesConverged)
		m.canariesOK = true
	}
	startedNow := false
	for {
		if b := m.batch; b > 0 && m.done[b] == "" && m.plan.Budget != nil && !m.paused && !startedNow {
			if w := m.wave(b); len(w) > 0 {
				emit(events.TypeRolloutBatchStarted)
				m.handWave(w)
			}
		}
		if b := m.batch; b > 0 && m.done[b] == "" {
			n, conv, failed := m.members(b)
			pb := m.plan.Batches[b-1]
			need := 0
			for need*100 < n*pb.SuccessPercent {
				need++
			}
			switch {
			case n-failed < need:
				emit(events.TypeRolloutBatchFailed)
				m.done[b] = "failed"
				if m.plan.OnFailure == events.OnFailurePause {
					if !m.paused {
						emit(events.TypeRolloutPaused)
						m.paused = true
					}
					return out
				}
				m.fail(emit)
				return out
			case conv < need:
				return out
			case pb.SoakSeconds > 0 && m.soaking[b].IsZero():
				emit(events.TypeRolloutBatchSoaking)
				m.soaking[b] = now
				return out
			case pb.SoakSeconds > 0 && now.Sub(m.soaking[b]) < time.Duration(pb.SoakSeconds)*time.Second:
				return out
			}
			emit(events.TypeRolloutBatchSucceeded)
			m.done[b] = "succeeded"
		}
		if m.batch == len(m.plan.Batches) {
			if m.done[m.batch] == "failed" && m.paused {
				return out
			}
			emit(events.TypeRolloutFailed)
			m.terminal = "failed"
			if m.done[m.batch] == "succeeded" {
				out[len(out)-1] = events.TypeRolloutSucceeded
				m.terminal = "succeeded"
			}
			return out
		}
		if m.paused {
			return out
		}
		next := m.batch + 1
		if m.plan.Approval == events.ApprovalManual && !m.approved[next] {
			if m.awaiting != next {
				emit(events.TypeRolloutAwaitingApproval)
				m.awaiting = next
			}
			return out
		}
		if m.plan.Budget != nil {
			w := m.wave(next)
			if len(w) == 0 && m.unhanded(next) > 0 {
				return out
			}
			m.handWave(w)
			startedNow = true
		} else {
			m.hand(false, next)
		}
		emit(events.TypeRolloutBatchStarted)
		m.batch, m.awaiting = next, 0
	}
}

// released is who was handed the revision, by the rules.
func (m *model) released() []string {
	var out []string
	for _, d := range m.targets {
		if m.removed[d] {
			continue
		}
		if m.plan.Budget != nil && !m.canary[d] {
			if m.batchHanded[d] {
				out = append(out, d)
			}
			continue
		}
		if (m.canary[d] && m.canaryStage) || (!m.canary[d] && m.batchOf[d] <= m.batch) {
			out = append(out, d)
		}
	}
	return out
}

// TestThePlanFoldAgreesWithABruteForceModel runs random plans through
// random reports, pauses, resumes, approvals, removals and clock steps,
// with the fold deciding (NextAt) as the runner does, and checks after every
// step that the transitions, the released devices and the end agree with
// the model; and that the fold in place, the copying fold and a fold
// restored from its snapshot agree with each other.
func TestThePlanFoldAgreesWithABruteForceModel(t *testing.T) {
	rounds := 400
	if testing.Short() {
		rounds = 50
	}
	for seed := range rounds {
		t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) { planRound(t, uint64(seed)) })
	}
}

// generation is one generation of the round: its model and its revision
// event's data.
type generation struct {
	gen   int64
	m     *model
	rev   events.DeploymentRevisionCreated
	k     int  // batches
	prior bool // the succeeded generation before the planned ones
}

// newGeneration draws a random plan over targets and canaries for
// generation gen; rollbackTo is the greatest earlier generation that
// succeeded (0: none).
func newGeneration(rng *rand.Rand, gen int64, targets, canaries []string, rollbackTo int64) generation {
	n := len(targets)
	plan := events.RolloutPlan{}
	if rng.IntN(2) == 0 {
		plan.Approval = events.ApprovalManual
	}
	switch rng.IntN(3) {
	case 1:
		plan.OnFailure = events.OnFailurePause
	case 2:
		plan.OnFailure = events.OnFailureRollback
	}
	k := 1 + rng.IntN(4)
	for range k {
		pb := events.PlanBatch{SuccessPercent: []int{50, 75, 100}[rng.IntN(3)]}
		if rng.IntN(3) == 0 {
			pb.SoakSeconds = 10
		}
		plan.Batches = append(plan.Batches, pb)
	}
	var groups []int
	if rng.IntN(2) == 0 {
		plan.Budget = &events.DisruptionBudget{LabelKey: "site", Values: []string{"a", "b"}}
		if rng.IntN(2) == 0 {
			plan.Budget.MaxUnavailable = 1 + rng.IntN(2)
		} else {
			plan.Budget.MaxPercent = 50
		}
		groups = make([]int, n)
		for i := range groups {
			groups[i] = rng.IntN(3) // 2: no label
		}
	}
	m := &model{targets: targets, canary: map[string]bool{}, batchOf: map[string]int{}, removed: map[string]bool{},
		results: map[string]events.WorkloadPhase{}, approved: map[int]bool{},
		soaking: map[int]time.Time{}, done: map[int]string{}, handed: map[string]bool{},
		groupOf: map[string]int{}, batchHanded: map[string]bool{}, prior: rollbackTo > 0, rollbackTo: rollbackTo, rolledBack: map[string]bool{}}
	for i, g := range groups {
		m.groupOf[targets[i]] = g
	}
	batches := make([]int, n)
	for i, d := range targets {
		if slices.Contains(canaries, d) {
			m.canary[d] = true
			continue
		}
		batches[i] = 1 + rng.IntN(k)
		m.batchOf[d] = batches[i]
	}
	for b := range plan.Batches {
		for _, d := range targets {
			if m.batchOf[d] == b+1 {
				plan.Batches[b].Size++
			}
		}
	}
	m.plan = plan
	return generation{gen: gen, m: m, k: k, rev: events.DeploymentRevisionCreated{UID: "u1", Generation: gen, RevisionID: fmt.Sprint("r", gen),
		Score: json.RawMessage(`{}`), Targets: targets, Canaries: canaries, Plan: &plan, TargetBatches: batches, TargetGroups: groups}}
}

func planRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	n := 1 + rng.IntN(10)
	var targets, canaries []string
	for i := range n {
		d := fmt.Sprintf("d%02d", i)
		targets = append(targets, d)
		if rng.IntN(4) == 0 {
			canaries = append(canaries, d)
		}
	}

	now := t0
	var log []events.Event // every event, in order
	var inPlace projections.Rollout
	add := func(keys events.Keys, d events.Data) events.Event {
		t.Helper()
		ev, err := events.New(keys, d, events.WithTime(now))
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, ev)
		inPlace.Fold(ev)
		return ev
	}
	dep := events.Keys{Namespace: "lab", Name: "api"}

	// gens are the round's generations, oldest first; the last is the one
	// the fold and the model decide for. With prior, generation 1 has no
	// plan and succeeded on every target before the planned ones.
	var gens []generation
	if rng.IntN(2) == 0 {
		all := map[string]bool{}
		for _, d := range targets {
			all[d] = true
		}
		gens = append(gens, generation{gen: 1, prior: true, m: &model{handed: all, rolledBack: map[string]bool{}, terminal: "succeeded"}})
		add(dep, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "r1", Score: json.RawMessage(`{}`),
			Targets: targets, Canaries: []string{}})
		for _, tr := range inPlace.NextAt(now) {
			add(dep, tr)
		}
		for _, d := range targets {
			add(events.Keys{Device: d}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1, RevisionID: "r1", Phase: events.WorkloadConverged})
		}
		for _, tr := range inPlace.NextAt(now) {
			add(dep, tr)
		}
		if inPlace.Stage != projections.StageSucceeded {
			t.Fatalf("the prior generation's rollout is %s", inPlace.Stage)
		}
	}
	// cur is the current generation; a new one may arrive mid-rollout.
	var cur generation
	start := func() {
		t.Helper()
		var last int64
		for _, g := range gens {
			if g.m.terminal == "succeeded" {
				last = g.gen
			}
		}
		cur = newGeneration(rng, int64(len(gens)+1), targets, canaries, last)
		gens = append(gens, cur)
		add(dep, cur.rev)
	}
	control := func(typ events.Type, d events.RolloutTransition) {
		d.UID, d.Generation, d.RevisionID = "u1", cur.gen, cur.rev.RevisionID
		add(dep, events.NewRolloutTransition(typ, d))
	}
	// run is the runner: it appends what the fold decides until it
	// decides nothing, and checks the model decided the same.
	run := func(step string) {
		t.Helper()
		var got []events.Type
		for range 20 {
			next := inPlace.NextAt(now)
			if len(next) == 0 {
				break
			}
			for _, tr := range next {
				got = append(got, tr.EventType())
				add(dep, tr)
			}
		}
		m := cur.m
		want := m.decide(now)
		if !slices.Equal(got, want) {
			t.Fatalf("after %s: the fold decided %v, the model %v (generation %d, plan %+v, batches %v, canaries %v)",
				step, got, want, cur.gen, m.plan, cur.rev.TargetBatches, canaries)
		}
		if diff := cmp.Diff(m.released(), sorted(inPlace.Released())); diff != "" {
			t.Fatalf("after %s: released (-model +fold):\n%s", step, diff)
		}
	}

	start()
	run("the revision")
	for i := range 80 {
		m := cur.m
		var step string
		switch x := rng.IntN(40); {
		case x < 21:
			d := targets[rng.IntN(n)]
			phase := []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged, events.WorkloadConverged, events.WorkloadFailed}[rng.IntN(4)]
			g := cur
			if len(gens) > 1 && rng.IntN(5) == 0 {
				g = gens[len(gens)-2] // a late report of the generation before: counts for nothing
			}
			step = fmt.Sprintf("step %d: %s reports %s of generation %d", i, d, phase, g.gen)
			add(events.Keys{Device: d}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: g.gen, RevisionID: fmt.Sprint("r", g.gen), Phase: phase})
			if g.gen == cur.gen && !m.removed[d] {
				m.results[d] = phase
			}
		case x < 25:
			step = fmt.Sprintf("step %d: pause", i)
			control(events.TypeRolloutPaused, events.RolloutTransition{By: "ana", Request: fmt.Sprint("p", i)})
			if m.terminal == "" {
				m.paused = true
			}
		case x < 29:
			step = fmt.Sprintf("step %d: resume", i)
			control(events.TypeRolloutResumed, events.RolloutTransition{By: "ana", Request: fmt.Sprint("r", i)})
			m.paused = false
		case x < 33:
			b := 1 + rng.IntN(cur.k+1)
			step = fmt.Sprintf("step %d: approve batch %d", i, b)
			control(events.TypeRolloutApproved, events.RolloutTransition{By: "ana", Batch: b, Request: fmt.Sprint("a", i)})
			if b == m.batch+1 && b <= cur.k {
				m.approved[b] = true
				if m.awaiting == b {
					m.awaiting = 0
				}
			}
		case x < 35:
			d := targets[rng.IntN(n)]
			step = fmt.Sprintf("step %d: %s removed", i, d)
			if m.terminal == "" && !m.removed[d] {
				control(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: d, Error: "Device deleted"})
				m.removed[d] = true
			}
		case x < 36 && len(gens) < 4:
			step = fmt.Sprintf("step %d: generation %d arrives", i, len(gens)+1)
			start()
		default:
			now = now.Add(time.Duration(rng.IntN(15)) * time.Second)
			step = fmt.Sprintf("step %d: the clock at +%s", i, now.Sub(t0))
		}
		run(step)
	}

	// fleet-intent gives each device the newest generation handed to it,
	// or the one a rollback handed back, whether the revisions are read
	// before their transitions or after them, and with every batch start's
	// list left out (the form a batch too large for one event takes).
	budgeted := map[int64]bool{}
	for _, g := range gens {
		budgeted[g.gen] = !g.prior && g.m.plan.Budget != nil
	}
	var intentEvents, rolloutFirst, unlisted, revisions []events.Event
	anyBudget := false
	for _, ev := range log {
		if ev.Type == events.TypeWorkloadStatus {
			continue
		}
		intentEvents = append(intentEvents, ev)
		if ev.Type != events.TypeDeploymentRevisionCreated {
			rolloutFirst = append(rolloutFirst, ev)
		} else {
			revisions = append(revisions, ev)
		}
		if ev.Type == events.TypeRolloutBatchStarted {
			d, err := events.Decode[events.RolloutTransition](ev)
			if err != nil {
				t.Fatal(err)
			}
			if budgeted[d.Generation] {
				anyBudget = true
			} else {
				d.Released = nil
				ev, err = events.New(ev.Keys, events.NewRolloutTransition(ev.Type, d), events.WithTime(ev.Time))
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		unlisted = append(unlisted, ev)
	}
	rolloutFirst = append(rolloutFirst, revisions...)
	variants := map[string][]events.Event{"in order": intentEvents, "revisions last": rolloutFirst}
	if !anyBudget {
		// With a budget every batch start lists its wave.
		variants["batch lists left out"] = unlisted
	}
	want := map[string]int64{}
	for _, d := range targets {
		for i := len(gens) - 1; i >= 0; i-- {
			g := gens[i]
			if !g.m.handed[d] {
				continue // handed nothing of it: the older one stands
			}
			want[d] = g.gen
			if g.m.rolledBack[d] {
				delete(want, d)
				for _, back := range gens {
					if back.gen == g.m.rollbackTo && back.m.handed[d] {
						want[d] = back.gen
					}
				}
			}
			break
		}
	}
	for name, evs := range variants {
		in := projections.NewIntent()
		for _, ev := range evs {
			in.Apply(ev)
		}
		got := map[string]int64{}
		for _, d := range targets {
			if v, ok := in.Value(d); ok {
				var di projections.DeviceIntent
				if err := json.Unmarshal(v, &di); err != nil {
					t.Fatal(err)
				}
				got[d] = di.Deployments[0].Generation
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			for _, ev := range evs {
				t.Logf("%s %s", ev.Type, ev.Data)
			}
			t.Errorf("fleet-intent generations, %s (-model +fold):\n%s", name, diff)
		}
	}

	// The copying fold, and a fold restored from a snapshot halfway, agree
	// with the fold in place.
	var copying, restored projections.Rollout
	for i, ev := range log {
		copying = copying.Apply(ev)
		restored.Fold(ev)
		if i == len(log)/2 {
			b, err := json.Marshal(restored)
			if err != nil {
				t.Fatal(err)
			}
			restored = projections.Rollout{}
			if err := json.Unmarshal(b, &restored); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, r := range map[string]projections.Rollout{"copying": copying, "restored": restored} {
		if diff := cmp.Diff(summary(inPlace, now), summary(r, now)); diff != "" {
			t.Errorf("the %s fold differs from the fold in place (-in place +%s):\n%s", name, name, diff)
		}
	}
}

// summary is what a reader of a fold sees.
func summary(r projections.Rollout, now time.Time) map[string]any {
	st, _ := r.Status()
	var next []events.Type
	for _, tr := range r.NextAt(now) {
		next = append(next, tr.EventType())
	}
	return map[string]any{"stage": r.Stage, "batch": r.Batch, "batches": r.Batches, "paused": r.Paused, "released": sorted(r.Released()),
		"tallies": r.BatchTallies(), "counts": r.Counts(), "status": st.Conditions[0].Message, "next": next, "awaiting": r.AwaitingApproval}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	if len(out) == 0 {
		return nil
	}
	return out
}
