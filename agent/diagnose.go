// Answering diagnose commands (ADR 0025): the device's containers, host
// resources, engine, last passes and reports, in one chunk.

package agent

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// diagnoseTimeout bounds the engine calls of a diagnosis.
const diagnoseTimeout = 10 * time.Second

// diagnose answers a diagnose command on lr's subject.
func (d *daemon) diagnose(ctx context.Context, lr events.LogsRequest) {
	subj, err := events.LogsSubject(d.o.Device, lr.Reader, lr.Request)
	if err != nil {
		d.log.WarnContext(ctx, "a diagnose command names no valid answer subject: ignored", "error", err)
		return
	}
	d.logs.wg.Go(func() {
		ctx, cancel := context.WithTimeout(d.logs.ctx, diagnoseTimeout)
		defer cancel()
		w := &chunkWriter{nc: d.o.Conn, subject: subj, now: time.Now}
		diag, err := d.diagnosis(ctx)
		if err != nil {
			w.end(err.Error())
			return
		}
		c := events.LogsChunk{Seq: 1, Sent: time.Now().UTC(), End: true, Diagnosis: &diag}
		b, err := json.Marshal(c)
		for err == nil && len(b) > LogChunkBytes && len(diag.Containers.Workloads) > 0 {
			diag.Containers.Workloads = diag.Containers.Workloads[:len(diag.Containers.Workloads)/2]
			diag.Containers.Truncated = true
			b, err = json.Marshal(c)
		}
		if err != nil {
			w.end("encode the diagnosis: " + err.Error())
			return
		}
		if err := d.o.Conn.Publish(subj, b); err != nil {
			d.log.WarnContext(ctx, "diagnosis not sent", "error", err)
		}
	})
}

// diagnosis gathers what DeviceDiagnosis holds.
func (d *daemon) diagnosis(ctx context.Context) (events.DeviceDiagnosis, error) {
	diag := events.DeviceDiagnosis{AgentVersion: d.o.AgentVersion}
	rt := d.o.Reconciler.Runtime
	if v, ok := rt.(runtime.Versioner); ok {
		if s, err := v.EngineVersion(ctx); err == nil {
			diag.Engine = s
		} else {
			diag.Engine = "unavailable: " + cutText(err.Error(), events.MaxDiagnosisError)
		}
	}
	owned, err := d.mon.owned(ctx)
	if err != nil {
		return diag, fmt.Errorf("the container engine did not answer: %w", err)
	}
	d.mon.mu.Lock()
	diag.Containers = d.mon.containers(owned)
	d.mon.mu.Unlock()
	for _, c := range owned {
		if len(c.Ports) == 0 {
			continue
		}
		if diag.Ports == nil {
			diag.Ports = map[string][]string{}
		}
		k := c.Labels[LabelNamespace] + "/" + c.Labels[LabelDeployment] + "/" + c.Name
		for _, p := range c.Ports {
			diag.Ports[k] = append(diag.Ports[k], fmt.Sprintf("%d:%d/%s", p.HostPort, p.ContainerPort, cmp.Or(p.Protocol, "tcp")))
		}
	}
	dir := d.o.StateDir
	if dir == "" {
		dir = "/"
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil {
		diag.DiskFree, diag.DiskTotal = fs.Bavail*uint64(fs.Bsize), fs.Blocks*uint64(fs.Bsize)
	}
	diag.MemAvailable, diag.MemTotal = meminfo()
	d.mu.Lock()
	diag.Passes = slices.Clone(d.passes)
	for _, ws := range d.reported {
		ws.Error = cutText(ws.Error, events.MaxDiagnosisError)
		diag.Workloads = append(diag.Workloads, ws)
	}
	d.mu.Unlock()
	slices.SortFunc(diag.Workloads, func(a, b events.WorkloadStatus) int {
		return strings.Compare(a.Namespace+"/"+a.Deployment, b.Namespace+"/"+b.Deployment)
	})
	if len(diag.Workloads) > events.MaxDiagnosisWorkloads {
		diag.Workloads = diag.Workloads[:events.MaxDiagnosisWorkloads]
	}
	return diag, nil
}

// meminfo reads MemAvailable and MemTotal (bytes) from /proc/meminfo; 0
// when unknown.
func meminfo() (avail, total uint64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "MemAvailable":
			avail = n << 10
		case "MemTotal":
			total = n << 10
		}
	}
	return avail, total
}

// recordPass keeps the last events.MaxDiagnosisPasses passes.
func (d *daemon) recordPass(result string, took time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.passes = append(d.passes, events.PassRecord{At: time.Now().UTC(), Seconds: took.Seconds(), Result: result})
	if len(d.passes) > events.MaxDiagnosisPasses {
		d.passes = slices.Clone(d.passes[len(d.passes)-events.MaxDiagnosisPasses:])
	}
}
