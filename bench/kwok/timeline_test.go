package main

import (
	"strings"
	"testing"
	"time"
)

// A log as kube-scheduler writes it at -v=3 (lines shortened): preempt-1
// has every step, preempt-2 never bound, other-1 is not a preemptor.
const timelineLog = `I1207 21:50:37.000000   16061 eventhandlers.go:242] "Add event for unscheduled pod" pod="bench/preempt-1"
I1207 21:50:37.000000   16061 eventhandlers.go:242] "Add event for unscheduled pod" pod="bench/preempt-2"
I1207 21:50:37.100000   16061 eventhandlers.go:242] "Add event for unscheduled pod" pod="bench/other-1"
I1207 21:50:39.000000   16061 schedule_one.go:117] "Attempting to schedule pod" pod="bench/preempt-1"
I1207 21:50:39.050000   16061 preemption.go:189] "the target node for the preemption is determined" pod="bench/preempt-1" node="h100-0164"
I1207 21:50:39.051000   16061 executor.go:255] "Start the preemption asynchronously" preemptor="bench/preempt-1" node="h100-0164" numVictims=4 numVictimsToDelete=4
I1207 21:50:39.100000   16061 schedule_one.go:117] "Attempting to schedule pod" pod="bench/preempt-2"
I1207 21:50:39.351000   16061 executor.go:310] "Async Preemption finished completely" preemptor="bench/preempt-1" node="h100-0164" result="success"
I1207 21:50:39.500000   16061 schedule_one.go:117] "Attempting to schedule pod" pod="bench/preempt-1"
I1207 21:50:40.351000   16061 schedule_one.go:117] "Attempting to schedule pod" pod="bench/preempt-1"
I1207 21:50:40.551000   16061 schedule_one.go:483] "Successfully bound pod to node" pod="bench/preempt-1" node="h100-0164" evaluatedNodes=1 feasibleNodes=1
I1207 21:50:40.600000   16061 schedule_one.go:483] "Successfully bound pod to node" pod="bench/other-1" node="h100-0001" evaluatedNodes=1 feasibleNodes=1
`

func TestTimeline(t *testing.T) {
	ts, err := readTimelines(strings.NewReader(timelineLog), "preempt-", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].name != "preempt-1" {
		t.Fatalf("timelines of %v, want only preempt-1's (preempt-2 never bound, other-1 is no preemptor)", ts)
	}
	want := map[string]time.Duration{
		"queue":   2 * time.Second,
		"cycle":   50 * time.Millisecond,
		"evict":   300 * time.Millisecond,
		"requeue": time.Second,
		"bind":    200 * time.Millisecond,
		"total":   3551 * time.Millisecond,
	}
	checkPhases(t, ts[0], want)
	if len(ts[0].attempts) != 3 {
		t.Errorf("%d attempts, want 3", len(ts[0].attempts))
	}
	var out strings.Builder
	writeTimelines(&out, ts)
	for _, line := range []string{"1 pods", "queue      2.000    2.000    2.000       2.0", "attempts   3.000"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("output lacks %q:\n%s", line, out.String())
		}
	}
}

// A log without a complete timeline (the scheduler at -v=2, which logs
// neither arrivals nor attempts) is an error that says what to check.
func TestTimelineIncomplete(t *testing.T) {
	var v2 []string
	for _, line := range strings.Split(timelineLog, "\n") {
		if !strings.Contains(line, "Attempting") && !strings.Contains(line, "Add event") {
			v2 = append(v2, line)
		}
	}
	if _, err := readTimelines(strings.NewReader(strings.Join(v2, "\n")), "preempt-", false); err == nil || !strings.Contains(err.Error(), "-v=3") {
		t.Errorf("error %v, want one that names -v=3", err)
	}
}

// With groups, a pod group's timeline runs from the group's arrival to the
// bind of its last pod, from the lines that name the group (podGroup, or
// preemptor in pod-group preemption's executor).
func TestTimelineGroups(t *testing.T) {
	const log = `I1207 22:18:35.000000    6988 eventhandlers.go:478] "Add event for pod group" podGroup="bench/preempt-gang-0012"
I1207 22:18:35.100000    6988 eventhandlers.go:242] "Add event for unscheduled pod" pod="bench/preempt-gang-0012-0"
I1207 22:18:36.000000    6988 schedule_one_podgroup.go:126] "Attempting to schedule pod group" podGroupType="podgroup" podGroup="bench/preempt-gang-0012"
I1207 22:18:36.800000    6988 executor.go:255] "Start the preemption asynchronously" preemptor="bench/preempt-gang-0012" node="cluster" numVictims=6 numVictimsToDelete=6
I1207 22:18:36.900000    6988 schedule_one_podgroup.go:906] "Pod group is waiting for preemption" podGroupType="podgroup" podGroup="bench/preempt-gang-0012" unschedulablePods=2
I1207 22:18:37.700000    6988 executor.go:310] "Async Preemption finished completely" preemptor="bench/preempt-gang-0012" node="cluster" result="success"
I1207 22:18:40.000000    6988 schedule_one_podgroup.go:126] "Attempting to schedule pod group" podGroupType="podgroup" podGroup="bench/preempt-gang-0012"
I1207 22:18:40.500000    6988 schedule_one.go:483] "Successfully bound pod to node" podGroupType="podgroup" podGroup="bench/preempt-gang-0012" pod="bench/preempt-gang-0012-0" node="h100-0061"
I1207 22:18:40.600000    6988 schedule_one.go:483] "Successfully bound pod to node" podGroupType="podgroup" podGroup="bench/preempt-gang-0012" pod="bench/preempt-gang-0012-1" node="h100-0741"
`
	ts, err := readTimelines(strings.NewReader(log), "preempt-gang-", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].name != "preempt-gang-0012" {
		t.Fatalf("timelines of %v, want preempt-gang-0012's only", ts)
	}
	want := map[string]time.Duration{
		"queue":   time.Second,
		"cycle":   900 * time.Millisecond,
		"evict":   900 * time.Millisecond,
		"requeue": 2300 * time.Millisecond,
		"bind":    600 * time.Millisecond,
		"total":   5600 * time.Millisecond,
	}
	checkPhases(t, ts[0], want)
	// The pods' own timelines are not complete: no attempt names them.
	if _, err := readTimelines(strings.NewReader(log), "preempt-gang-", false); err == nil {
		t.Error("pod timelines from a log of group attempts: no error")
	}
}

// checkPhases fails for each phase of the timeline whose duration is not
// want's.
func checkPhases(t *testing.T, tl timeline, want map[string]time.Duration) {
	t.Helper()
	for _, phase := range timelinePhases {
		if got := phase.of(tl); got != want[phase.name] {
			t.Errorf("%s = %v, want %v", phase.name, got, want[phase.name])
		}
	}
}
