package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// A preemptor's timeline, read from the scheduler's log at -v=3 (the
// level at which kube-scheduler logs each attempt and each pod it sees
// added): where each second between the pod's arrival and its bind went.
//
//	queue    first seen → first scheduling attempt: waiting in the active
//	         queue behind other pods' cycles
//	cycle    first attempt → the preemption's target node determined: the
//	         failed Filter on every node and the dry runs
//	evict    the asynchronous preemption: the victims' API calls
//	requeue  evictions done → the last attempt: the victims' claims freed
//	         (claim controller), the event that requeues the pod, its
//	         backoff and its wait in the active queue, and any attempt
//	         in between that found the devices not yet free
//	bind     the last attempt → bound: its cycle on the nominated node
//	         and the binding cycle's API writes
type timeline struct {
	// name is the pod's, or the pod group's.
	name                                          string
	seen, nominated, evictStart, evictDone, bound time.Time
	attempts                                      []time.Time
}

// timelineLine matches kube-scheduler's klog text lines: the time and the
// message.
var timelineLine = regexp.MustCompile(`^I\d{4} (\d\d:\d\d:\d\d\.\d+)\s+\d+ \S+\] "([^"]+)"`)

// timelinePod and timelineGroup find the pod, or the pod group, a line is
// about: "pod", "podGroup", or in the executor's lines "preemptor" (a pod,
// or for pod-group preemption the group).
var (
	timelinePod   = regexp.MustCompile(` (?:pod|preemptor)="[^/"]+/([^"]+)"`)
	timelineGroup = regexp.MustCompile(` (?:podGroup|preemptor)="[^/"]+/([^"]+)"`)
)

// readTimelines reads the timelines of the pods whose names start with
// prefix from a scheduler log, or with groups those of the pod groups
// (from the group's arrival to the bind of its last pod); only those with
// every step logged are kept.
func readTimelines(r io.Reader, prefix string, groups bool) ([]timeline, error) {
	subject, seen, attempt, nominated := timelinePod, "Add event for unscheduled pod", "Attempting to schedule pod", "the target node for the preemption is determined"
	if groups {
		subject, seen, attempt, nominated = timelineGroup, "Add event for pod group", "Attempting to schedule pod group", "Pod group is waiting for preemption"
	}
	byName := map[string]*timeline{}
	var order []string
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for scanner.Scan() {
		line := scanner.Text()
		m := timelineLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name := subject.FindStringSubmatch(line)
		if name == nil || !strings.HasPrefix(name[1], prefix) {
			continue
		}
		at, err := time.Parse("15:04:05.000000", m[1])
		if err != nil {
			return nil, fmt.Errorf("time %q: %w", m[1], err)
		}
		t, ok := byName[name[1]]
		if !ok {
			t = &timeline{name: name[1]}
			byName[name[1]] = t
			order = append(order, name[1])
		}
		first := func(field *time.Time) {
			if field.IsZero() {
				*field = at
			}
		}
		switch m[2] {
		case seen:
			first(&t.seen)
		case attempt:
			t.attempts = append(t.attempts, at)
		case nominated:
			first(&t.nominated)
		case "Start the preemption asynchronously":
			first(&t.evictStart)
		case "Async Preemption finished completely":
			first(&t.evictDone)
		case "Successfully bound pod to node":
			// The last: a group is bound with its last pod.
			t.bound = at
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	var out []timeline
	for _, name := range order {
		t := byName[name]
		if t.seen.IsZero() || t.nominated.IsZero() || t.evictStart.IsZero() || t.evictDone.IsZero() || t.bound.IsZero() || len(t.attempts) == 0 {
			continue
		}
		out = append(out, *t)
	}
	if len(out) == 0 {
		return nil, errors.New("no complete timeline: is the log at -v=3, and the prefix right (and --groups for pod groups)?")
	}
	return out, nil
}

// timelinePhases are the phases in order, each with its duration in a
// timeline.
var timelinePhases = []struct {
	name string
	of   func(timeline) time.Duration
}{
	{"queue", func(t timeline) time.Duration { return t.attempts[0].Sub(t.seen) }},
	{"cycle", func(t timeline) time.Duration { return t.nominated.Sub(t.attempts[0]) }},
	{"evict", func(t timeline) time.Duration { return t.evictDone.Sub(t.evictStart) }},
	{"requeue", func(t timeline) time.Duration { return t.attempts[len(t.attempts)-1].Sub(t.evictDone) }},
	{"bind", func(t timeline) time.Duration { return t.bound.Sub(t.attempts[len(t.attempts)-1]) }},
	{"total", func(t timeline) time.Duration { return t.bound.Sub(t.seen) }},
}

// writeTimelines writes each phase's p50, p90, p99 (percentile, as the
// benchmark's latencies) and sum over the pods, the attempts per pod and
// the pace of first attempts.
func writeTimelines(w io.Writer, ts []timeline) {
	_, _ = fmt.Fprintf(w, "%d pods\nphase      p50 s    p90 s    p99 s     sum s\n", len(ts))
	row := func(name string, of func(timeline) float64) {
		v := make([]float64, 0, len(ts))
		var sum float64
		for _, t := range ts {
			v = append(v, of(t))
			sum += of(t)
		}
		_, _ = fmt.Fprintf(w, "%-8s %7.3f  %7.3f  %7.3f  %8.1f\n", name, percentile(v, 0.5), percentile(v, 0.9), percentile(v, 0.99), sum)
	}
	for _, phase := range timelinePhases {
		row(phase.name, func(t timeline) float64 { return phase.of(t).Seconds() })
	}
	row("attempts", func(t timeline) float64 { return float64(len(t.attempts)) })
	firsts := make([]time.Time, 0, len(ts))
	for _, t := range ts {
		firsts = append(firsts, t.attempts[0])
	}
	if len(ts) > 1 {
		span := slices.MaxFunc(firsts, time.Time.Compare).Sub(slices.MinFunc(firsts, time.Time.Compare))
		_, _ = fmt.Fprintf(w, "first attempts: %.1f s from the first to the last, %.1f ms apart on average\n",
			span.Seconds(), float64(span.Milliseconds())/float64(len(ts)-1))
	}
}

func newTimelineCommand() *cobra.Command {
	prefix, groups := "preempt-", false
	cmd := &cobra.Command{
		Use:   "timeline SCHEDULER.log",
		Short: "Where the preemptors' time went, from a scheduler's log at -v=3 (preempt and preempt_gang cases)",
		Long: `timeline reads the log of a scheduler run with -v=3 (hack/bench-kwok.sh:
SCHEDULER_ARGS=--v=3, the log in _output/bench/kwok/logs) and writes, over the
pods whose names start with --prefix, the p50, p90, p99 and sum of each phase
between a pod's arrival and its bind: queue (until its first attempt), cycle
(until preemption chose its node), evict (the victims' API calls), requeue
(until its last attempt), bind (until bound); and the attempts per pod.
With --groups, the same per pod group (preempt_gang: --prefix preempt-gang-),
from the group's arrival to the bind of its last pod.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			ts, err := readTimelines(f, prefix, groups)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			writeTimelines(cmd.OutOrStdout(), ts)
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", prefix, "The preemptors' name prefix (preempt- in the preempt case, preempt-gang- for its groups in preempt_gang).")
	cmd.Flags().BoolVar(&groups, "groups", groups, "Timelines of pod groups (scheduled as one in Kubernetes 1.37) instead of pods.")
	return cmd
}
