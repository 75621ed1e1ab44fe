package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progressInterval is how often a progress line is printed.
const progressInterval = 2 * time.Second

// progress prints how many of a case's pods are bound, at most every
// progressInterval: "    fill   [#####...............]  123/540 bound   4.1 s".
type progress struct {
	w          io.Writer
	name       string
	total      int
	start      time.Time
	now        func() time.Time
	lastPrint  time.Time
	lastPrintN int
}

func newProgress(w io.Writer, name string, total int, start time.Time) *progress {
	return &progress{w: w, name: name, total: total, start: start, now: time.Now, lastPrintN: -1}
}

// update prints the count if progressInterval has passed since the last
// line.
func (p *progress) update(bound int) {
	now := p.now()
	if now.Sub(p.lastPrint) < progressInterval {
		return
	}
	p.print(bound, now)
}

// done prints the final count unless the last line said it.
func (p *progress) done(bound int) {
	if bound != p.lastPrintN {
		p.print(bound, p.now())
	}
}

func (p *progress) print(bound int, now time.Time) {
	p.lastPrint, p.lastPrintN = now, bound
	_, _ = fmt.Fprintf(p.w, "    %-10s %s %6d/%d bound %6.1f s\n", p.name, bar(bound, p.total, 20), bound, p.total, now.Sub(p.start).Seconds())
}

func bar(done, total, width int) string {
	filled := width
	if total > 0 {
		filled = min(done*width/total, width)
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}
