package events

// The strict reader of the data the folds read most, workload reports,
// rollout transitions and inventories, in the form encoding/json writes them: the fields
// in the struct's order (omitempty ones left out when empty), no
// whitespace, strings of plain printable ASCII without escapes, integers
// as JSON writes them. Anything else (another order, another or a repeated
// field, whitespace, an escape, a number out of range, a null, a false
// written out) makes it give up, and Decode decodes with encoding/json. So
// what it accepts it reads exactly as encoding/json does, and everything
// else, hostile data included, gets encoding/json's answer
// (TestTheDataReaderReadsAsEncodingJSON and FuzzDataReader compare the
// two).

// decodeStrict is Decode by the strict reader: ok is false when T is not
// one of the types it reads, e is not of T's type or of a version this
// build knows, or its data is not in the canonical form; Decode then
// decodes with encoding/json (and gives the errors). It never takes the
// address of a T, so a caller's value stays on its stack.
func decodeStrict[T Data](e Event) (v T, ok bool) {
	info, known := e.Type.Info()
	if !known || e.Version > info.Version {
		return v, false
	}
	switch any(v).(type) {
	case WorkloadStatus:
		if e.Type != TypeWorkloadStatus {
			return v, false
		}
		d, ok := readWorkloadStatus(e.Data)
		return any(d).(T), ok
	case RolloutTransition:
		if info.Family != FamilyDeploymentRollout {
			return v, false
		}
		d, ok := readRolloutTransition(e.Data)
		d.typ = e.Type
		return any(d).(T), ok
	case DeviceInventory:
		if e.Type != TypeDeviceInventory {
			return v, false
		}
		d, ok := readDeviceInventory(e.Data)
		return any(d).(T), ok
	}
	return v, false
}

// readDeviceInventory reads a DeviceInventory as json.Unmarshal would; ok
// is false when b is not in the canonical form (labels in increasing key
// order, as encoding/json writes a map).
func readDeviceInventory(b []byte) (d DeviceInventory, ok bool) {
	s := strictReader{b: b}
	s.lit(`{"os":`)
	d.OS = s.text()
	s.lit(`,"arch":`)
	d.Arch = s.text()
	s.lit(`,"kernel":`)
	d.Kernel = s.text()
	s.lit(`,"agentVersion":`)
	d.AgentVersion = s.text()
	if s.opt(`,"labels":{`) {
		d.Labels = map[string]string{}
		last := ""
		for !s.bad && !s.opt(`}`) {
			if len(d.Labels) > 0 {
				s.lit(`,`)
			}
			k := s.text()
			s.lit(`:`)
			v := s.text()
			// A repeated or unsorted key, or an empty map, is no map
			// encoding/json wrote.
			if len(d.Labels) > 0 && k <= last {
				s.fail()
			}
			d.Labels[k], last = v, k
		}
		if len(d.Labels) == 0 {
			s.fail()
		}
	}
	if s.opt(`,"timeZone":`) {
		d.TimeZone = s.text()
	}
	s.lit(`}`)
	return d, s.end()
}

// readWorkloadStatus reads a WorkloadStatus as json.Unmarshal would; ok is
// false when b is not in the canonical form.
func readWorkloadStatus(b []byte) (d WorkloadStatus, ok bool) {
	s := strictReader{b: b}
	s.lit(`{"namespace":`)
	d.Namespace = s.text()
	s.lit(`,"deployment":`)
	d.Deployment = s.text()
	s.lit(`,"uid":`)
	d.UID = s.text()
	s.lit(`,"generation":`)
	d.Generation = s.int64()
	s.lit(`,"revisionId":`)
	d.RevisionID = s.text()
	s.lit(`,"phase":`)
	d.Phase = s.phase()
	if s.opt(`,"error":`) {
		d.Error = s.text()
	}
	s.lit(`,"since":`)
	d.Since = s.time()
	if s.opt(`,"windowOpens":`) {
		opens := s.time()
		d.WindowOpens = &opens
	}
	s.lit(`}`)
	return d, s.end()
}

// readRolloutTransition reads a RolloutTransition's fields as
// json.Unmarshal would (the type is the caller's); ok is false when b is
// not in the canonical form.
func readRolloutTransition(b []byte) (d RolloutTransition, ok bool) {
	s := strictReader{b: b}
	s.lit(`{"uid":`)
	d.UID = s.text()
	s.lit(`,"generation":`)
	d.Generation = s.int64()
	s.lit(`,"revisionId":`)
	d.RevisionID = s.text()
	s.lit(`,"counts":{"total":`)
	d.Counts.Total = s.int()
	s.lit(`,"succeeded":`)
	d.Counts.Succeeded = s.int()
	s.lit(`,"pending":`)
	d.Counts.Pending = s.int()
	s.lit(`,"failed":`)
	d.Counts.Failed = s.int()
	s.lit(`,"canaries":`)
	d.Counts.Canaries = s.int()
	s.lit(`,"canariesSucceeded":`)
	d.Counts.CanariesSucceeded = s.int()
	s.lit(`,"canariesFailed":`)
	d.Counts.CanariesFailed = s.int()
	if s.opt(`,"followers":`) {
		d.Counts.Followers = s.int()
	}
	s.lit(`}`)
	if s.opt(`,"device":`) {
		d.Device = s.text()
	}
	if s.opt(`,"error":`) {
		d.Error = s.text()
	}
	if s.opt(`,"released":[`) {
		d.Released = []string{} // [] decodes to an empty list, not nil
		for !s.opt(`]`) {
			if len(d.Released) > 0 {
				s.lit(`,`)
			}
			d.Released = append(d.Released, s.text())
			if s.bad {
				break
			}
		}
	}
	if s.opt(`,"batch":`) {
		d.Batch = s.int()
	}
	if s.opt(`,"by":`) {
		d.By = s.text()
	}
	if s.opt(`,"request":`) {
		d.Request = s.text()
	}
	if s.opt(`,"rollbackTo":`) {
		d.RollbackTo = s.int64()
	}
	if s.opt(`,"follow":true`) {
		d.Follow = true
	}
	if s.opt(`,"reason":`) {
		d.Reason = s.text()
	}
	if s.opt(`,"change":`) {
		d.Change = s.text()
	}
	if s.opt(`,"handedGeneration":`) {
		d.HandedGeneration = s.int64()
	}
	if s.opt(`,"handedRevisionId":`) {
		d.HandedRevisionID = s.text()
	}
	if s.opt(`,"budgetGroup":`) {
		d.BudgetGroup = s.text()
	}
	s.lit(`}`)
	return d, s.end()
}

// phase reads a workload phase; the known ones are not allocated again.
func (s *strictReader) phase() WorkloadPhase {
	b := s.str()
	for _, p := range knownPhases {
		if string(b) == string(p) {
			return p
		}
	}
	return WorkloadPhase(b)
}

// knownPhases are the phases phase returns without allocating.
var knownPhases = [...]WorkloadPhase{WorkloadConverged, WorkloadFailed, WorkloadPending, WorkloadApplying, WorkloadRemoved}
