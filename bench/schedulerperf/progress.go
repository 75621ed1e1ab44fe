package schedulerperf

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Progress prints where a suite run is: a bar, the run, elapsed time and an
// estimate of the time left, and each run's result as it finishes.
type Progress struct {
	w     io.Writer
	total int
	start time.Time
	now   func() time.Time

	done       int
	runStart   time.Time
	runSeconds float64 // sum over finished runs
}

// NewProgress starts a progress display of total runs on w.
func NewProgress(w io.Writer, total int) *Progress {
	p := &Progress{w: w, total: total, now: time.Now}
	p.start = p.now()
	return p
}

// Start announces a run.
func (p *Progress) Start(r Run, runs int) {
	p.runStart = p.now()
	left := "?"
	if p.done > 0 {
		avg := p.runSeconds / float64(p.done)
		left = formatClock(time.Duration(avg*float64(p.total-p.done)) * time.Second)
	}
	_, _ = fmt.Fprintf(p.w, "%s %2d/%d  %s elapsed, ~%s left  %s  %-8s run %d/%d\n",
		bar(p.done, p.total, 20), p.done+1, p.total, formatClock(p.now().Sub(p.start)), left,
		r.Case.Name, r.Scheduler, r.Index, runs)
}

// Done reports a run's result.
func (p *Progress) Done(m Measurement) {
	took := p.now().Sub(p.runStart)
	p.done++
	p.runSeconds += took.Seconds()
	if m.Err != nil || m.Throughput == nil {
		_, _ = fmt.Fprintf(p.w, "    failed after %s: %v\n", took.Round(time.Second), m.Err)
		return
	}
	_, _ = fmt.Fprintf(p.w, "    %.1f pods/s average (p50 %.1f, p90 %.1f) in %s\n",
		m.Throughput["Average"], m.Throughput["Perc50"], m.Throughput["Perc90"], took.Round(time.Second))
}

// Finish prints the total time.
func (p *Progress) Finish() {
	_, _ = fmt.Fprintf(p.w, "%s %d/%d  done in %s\n", bar(p.done, p.total, 20), p.done, p.total, formatClock(p.now().Sub(p.start)))
}

func bar(done, total, width int) string {
	filled := 0
	if total > 0 {
		filled = done * width / total
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

func formatClock(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}
