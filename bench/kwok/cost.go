package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/prometheus/procfs"
)

// The scheduler's cost, read from /proc of its process (prometheus/procfs):
// the CPU time it used and its peak resident set size while a case ran.
// On a shared 2-core machine the API server's writes set the pace of a
// run, so what the scheduler itself costs per pod has to be read from its
// own process, not from pods/s.

// costMeter reads the scheduler process's CPU time and peak RSS; procRoot
// is /proc but for tests.
type costMeter struct {
	pid      int
	procRoot string
}

// costMark is the scheduler's CPU time when a measurement started.
type costMark struct {
	cpuSeconds float64
}

// mark starts a measurement: it reads the CPU time so far and resets the
// process's peak RSS to its current RSS (writing 5 to clear_refs, see
// proc(5)), so that the peak read at the end is the case's own.
func (m costMeter) mark() (costMark, error) {
	proc, err := m.proc()
	if err != nil {
		return costMark{}, err
	}
	stat, err := proc.Stat()
	if err != nil {
		return costMark{}, fmt.Errorf("scheduler process %d: %w", m.pid, err)
	}
	clearRefs := filepath.Join(m.procRoot, strconv.Itoa(m.pid), "clear_refs")
	if err := os.WriteFile(clearRefs, []byte("5"), 0o600); err != nil {
		return costMark{}, fmt.Errorf("reset the peak RSS of scheduler process %d: %w", m.pid, err)
	}
	return costMark{cpuSeconds: stat.CPUTime()}, nil
}

// since returns the CPU seconds the process used since the mark and its
// peak RSS since then, in bytes.
func (m costMeter) since(start costMark) (cpuSeconds float64, peakRSS uint64, err error) {
	proc, err := m.proc()
	if err != nil {
		return 0, 0, err
	}
	stat, err := proc.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("scheduler process %d: %w", m.pid, err)
	}
	status, err := proc.NewStatus()
	if err != nil {
		return 0, 0, fmt.Errorf("scheduler process %d: %w", m.pid, err)
	}
	return stat.CPUTime() - start.cpuSeconds, status.VmHWM, nil
}

func (m costMeter) proc() (procfs.Proc, error) {
	fs, err := procfs.NewFS(m.procRoot)
	if err != nil {
		return procfs.Proc{}, err
	}
	proc, err := fs.Proc(m.pid)
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("scheduler process %d: %w", m.pid, err)
	}
	return proc, nil
}

// markCost starts measuring the scheduler's cost for the case running.
func (r *runner) markCost() {
	if r.cost == nil {
		return
	}
	r.costStart, r.costErr = r.cost.mark()
}

// recordCost puts the scheduler's cost since the last mark into the case.
func (r *runner) recordCost(c *caseResult) {
	if r.cost == nil || !slices.Contains(costCases, c.Name) {
		return
	}
	if r.costErr != nil {
		c.addErrors(r.costErr)
		return
	}
	cpu, rss, err := r.cost.since(r.costStart)
	if err != nil {
		c.addErrors(err)
		return
	}
	c.CPUSeconds, c.PeakRSSBytes = cpu, rss
}
