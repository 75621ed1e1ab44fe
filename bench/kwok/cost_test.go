package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// writeProc writes a /proc/PID of a process that used utime+stime clock
// ticks (procfs reads them at 100 per second) and has a peak RSS of hwmKB.
func writeProc(t *testing.T, root string, pid, ticks, hwmKB int) {
	t.Helper()
	dir := filepath.Join(root, itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Fields after the command: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime ...
	stat := itoa(pid) + " (scheduler) S 1 1 1 0 -1 0 0 0 0 0 " + itoa(ticks/2) + " " + itoa(ticks-ticks/2) + " 0 0 20 0 1 0 1 1000 100 " + strings.Repeat("0 ", 30)
	status := "Name:\tscheduler\nVmHWM:\t" + itoa(hwmKB) + " kB\nVmRSS:\t" + itoa(hwmKB/2) + " kB\n"
	for name, data := range map[string]string{"stat": stat, "status": status} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestCostMeter(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 42, 300, 2048)
	m := costMeter{pid: 42, procRoot: root}
	mark, err := m.mark()
	if err != nil {
		t.Fatal(err)
	}
	// mark resets the peak RSS, as proc(5) says: 5 into clear_refs.
	if data, err := os.ReadFile(filepath.Join(root, "42", "clear_refs")); err != nil || string(data) != "5" {
		t.Errorf("clear_refs %q, %v; want 5", data, err)
	}
	writeProc(t, root, 42, 550, 4096)
	cpu, rss, err := m.since(mark)
	if err != nil {
		t.Fatal(err)
	}
	if cpu != 2.5 || rss != 4096*1024 {
		t.Errorf("since the mark: %v CPU seconds, %d bytes peak RSS; want 2.5 s, 4 MiB", cpu, rss)
	}
}

func TestCostMeterGone(t *testing.T) {
	m := costMeter{pid: 42, procRoot: t.TempDir()}
	if _, err := m.mark(); err == nil || !strings.Contains(err.Error(), "scheduler process 42") {
		t.Errorf("mark of a process that is not there: %v, want an error naming it", err)
	}
}

// TestRecordCost: only the cost cases get the scheduler's cost, and a case
// whose measurement failed says why instead of reporting none.
func TestRecordCost(t *testing.T) {
	root := t.TempDir()
	writeProc(t, root, 7, 100, 1024)
	r := &runner{cost: &costMeter{pid: 7, procRoot: root}}
	r.markCost()
	writeProc(t, root, 7, 300, 1024)
	fill, preempt := caseResult{Name: caseFill}, caseResult{Name: casePreempt}
	r.recordCost(&fill)
	r.recordCost(&preempt)
	if fill.CPUSeconds != 2 || fill.PeakRSSBytes != 1024*1024 || fill.failed() {
		t.Errorf("fill: %+v", fill)
	}
	if preempt.CPUSeconds != 0 || preempt.PeakRSSBytes != 0 {
		t.Errorf("preempt has a cost: %+v", preempt)
	}
	if err := os.RemoveAll(filepath.Join(root, "7")); err != nil {
		t.Fatal(err)
	}
	r.markCost()
	churn := caseResult{Name: caseChurn}
	r.recordCost(&churn)
	if !churn.failed() || churn.CPUSeconds != 0 {
		t.Errorf("churn of a gone scheduler: %+v, want an error", churn)
	}
}
