package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/invariants"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/driver/gpu"
)

// query says which pods a report is about.
type query struct {
	namespace, schedulerName string
	// selector picks among the scheduler's pods; nil: all of them.
	selector labels.Selector
}

// snapshot is what the report is made of, read from the cluster at once.
type snapshot struct {
	// pods are the pods of the scheduler (those of the selector), sorted
	// by name.
	pods []*corev1.Pod
	// groups are the PodGroups that these pods name, by name; a group
	// that does not exist (yet) is missing.
	groups map[string]*minor.PodGroup
	// claims by name, in the pods' namespace.
	claims map[string]*resourceapi.ResourceClaim
	// devices by "<pool>/<device>", of the GPU driver.
	devices map[string]*resourceapi.Device
	// cluster is everything read, for invariants.Check.
	cluster invariants.Cluster
}

// podState classifies a pod for the report.
type podState int

const (
	podPending podState = iota
	podBound
	podUnschedulable
)

// stateOfPod: bound once it has a node; unschedulable when the scheduler
// says so in the PodScheduled condition; pending otherwise (not tried yet,
// or waiting for its claims to be created).
func stateOfPod(pod *corev1.Pod) (podState, string) {
	if pod.Spec.NodeName != "" {
		return podBound, ""
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return podUnschedulable, c.Message
		}
	}
	return podPending, ""
}

// readSnapshot reads the namespace's pods of the scheduler, their claims,
// their PodGroups and the driver's devices.
func readSnapshot(ctx context.Context, client kubernetes.Interface, q query) (*snapshot, error) {
	namespace := q.namespace
	podList, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claimList, err := client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	sliceList, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	s := &snapshot{
		groups:  map[string]*minor.PodGroup{},
		claims:  map[string]*resourceapi.ResourceClaim{},
		devices: map[string]*resourceapi.Device{},
		cluster: invariants.Cluster{Pods: podList.Items, Claims: claimList.Items, Slices: sliceList.Items, Nodes: nodeList.Items},
	}
	for i := range podList.Items {
		pod := &podList.Items[i]
		if pod.Spec.SchedulerName == q.schedulerName && (q.selector == nil || q.selector.Matches(labels.Set(pod.Labels))) {
			s.pods = append(s.pods, pod)
		}
	}
	// Only pods of a group need the PodGroup API, which is served only with
	// the workload feature gates.
	for _, pod := range s.pods {
		name := podGroupOf(pod)
		if name == "" || s.groups[name] != nil {
			continue
		}
		group, err := minor.PodGroups(client, namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, err
		default:
			s.groups[name] = group
		}
	}
	slices.SortFunc(s.pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	for i := range claimList.Items {
		s.claims[claimList.Items[i].Name] = &claimList.Items[i]
	}
	for i := range sliceList.Items {
		slice := &sliceList.Items[i]
		if slice.Spec.Driver != gpu.DefaultDriverName {
			continue
		}
		for j := range slice.Spec.Devices {
			s.devices[slice.Spec.Pool.Name+"/"+slice.Spec.Devices[j].Name] = &slice.Spec.Devices[j]
		}
	}
	return s, nil
}

// counts returns how many pods are in each state, and the names of the
// unschedulable ones.
func (s *snapshot) counts() (bound, unschedulable, pending int, unschedulableNames sets.Set[string]) {
	unschedulableNames = sets.New[string]()
	for _, pod := range s.pods {
		switch state, _ := stateOfPod(pod); state {
		case podBound:
			bound++
		case podUnschedulable:
			unschedulable++
			unschedulableNames.Insert(pod.Name)
		default:
			pending++
		}
	}
	return bound, unschedulable, pending, unschedulableNames
}

// settled: no pod is pending, and when expected is not nil, exactly the
// expected pods are unschedulable. A pod that should fit may be
// unschedulable for a while (the scheduler tried before its claim or a
// node's slices were there); the scheduler retries it.
func (s *snapshot) settled(expected sets.Set[string]) bool {
	_, _, pending, unschedulable := s.counts()
	if pending > 0 || len(s.pods) == 0 {
		return false
	}
	return expected == nil || unschedulable.Equal(expected)
}

// claimsOf returns the pod's claims by their name in the pod, nil where a
// claim does not exist (yet).
func (s *snapshot) claimsOf(pod *corev1.Pod) ([]string, map[string]*resourceapi.ResourceClaim) {
	var names []string
	claims := map[string]*resourceapi.ResourceClaim{}
	for i := range pod.Spec.ResourceClaims {
		podClaim := &pod.Spec.ResourceClaims[i]
		names = append(names, podClaim.Name)
		name, _, err := resourceclaim.Name(pod, podClaim)
		if err != nil || name == nil {
			continue
		}
		claims[podClaim.Name] = s.claims[*name]
	}
	return names, claims
}

// describeDevice says what a device is: product and PCIe root of a GPU,
// profile and parent of a MIG device.
func describeDevice(d *resourceapi.Device) string {
	if d == nil {
		return "(not in any ResourceSlice)"
	}
	str := func(name resourceapi.QualifiedName) string {
		return ptr.Deref(d.Attributes[name].StringValue, "")
	}
	product := strings.TrimPrefix(str("productName"), "NVIDIA ")
	if str("type") == "mig" {
		return fmt.Sprintf("MIG %s on gpu-%d, %s", str("profile"), ptr.Deref(d.Attributes["parentIndex"].IntValue, -1), product)
	}
	details := product
	if root := str("resource.kubernetes.io/pcieRoot"); root != "" {
		details += ", pcieRoot " + root
	}
	return details
}

// writeTable prints one row per allocated device: pod, node, request,
// device and what the device is; pods that are not bound get one row, and
// the scheduler's messages for unschedulable pods follow the table.
func writeTable(out io.Writer, s *snapshot) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "POD\tNODE\tREQUEST\tDEVICE\tWHAT")
	var unschedulable []string
	for _, pod := range s.pods {
		state, message := stateOfPod(pod)
		switch state {
		case podUnschedulable:
			_, _ = fmt.Fprintf(w, "%s\t-\t-\t-\tunschedulable, see below\n", pod.Name)
			unschedulable = append(unschedulable, fmt.Sprintf("%s: %s", pod.Name, message))
			continue
		case podPending:
			_, _ = fmt.Fprintf(w, "%s\t-\t-\t-\tpending\n", pod.Name)
			continue
		}
		names, claims := s.claimsOf(pod)
		rows := 0
		for _, name := range names {
			claim := claims[name]
			if claim == nil || claim.Status.Allocation == nil {
				_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t-\tclaim not allocated\n", pod.Name, pod.Spec.NodeName, name)
				rows++
				continue
			}
			shared := ""
			if len(claim.Status.ReservedFor) > 1 {
				shared = fmt.Sprintf(" (claim %s, shared by %d pods)", claim.Name, len(claim.Status.ReservedFor))
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				device := r.Device
				if r.Pool != pod.Spec.NodeName {
					device = r.Pool + "/" + r.Device
				}
				_, _ = fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s%s\n", pod.Name, pod.Spec.NodeName, r.Request, device,
					describeDevice(s.devices[r.Pool+"/"+r.Device]), shared)
				rows++
			}
		}
		if rows == 0 {
			_, _ = fmt.Fprintf(w, "%s\t%s\t-\t-\tno resource claims\n", pod.Name, pod.Spec.NodeName)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(unschedulable) > 0 {
		_, _ = fmt.Fprintln(out, "\nWhy the scheduler left pods pending (their PodScheduled condition):")
		for _, u := range unschedulable {
			_, _ = fmt.Fprintf(out, "  %s\n", u)
		}
	}
	return nil
}

// verify checks the allocations as an observer can (invariants.Check,
// every allocated device published): every claim of a bound pod is
// allocated on the pod's node and reserved for it; no device belongs to two
// claims.
func verify(s *snapshot) error {
	return errors.Join(invariants.Check(s.cluster, invariants.Options{Unpublished: true})...)
}

// podGroupOf returns the name of the pod's PodGroup, "" if none.
func podGroupOf(pod *corev1.Pod) string {
	return ptr.Deref(minor.PodGroupName(pod), "")
}

// groupState is what a PodGroup's pods got.
type groupState struct {
	name              string
	group             *minor.PodGroup // nil if it does not exist
	pods, bound       int
	claims, allocated int
}

// minCount is the gang's minCount, 0 if the group is not a gang.
func (g *groupState) minCount() int {
	if g.group == nil || g.group.Spec.SchedulingPolicy.Gang == nil {
		return 0
	}
	return int(g.group.Spec.SchedulingPolicy.Gang.MinCount)
}

// podGroups returns the state of every PodGroup that the pods name, by
// name.
func (s *snapshot) podGroups() []*groupState {
	byName := map[string]*groupState{}
	var groups []*groupState
	for _, pod := range s.pods {
		name := podGroupOf(pod)
		if name == "" {
			continue
		}
		g := byName[name]
		if g == nil {
			g = &groupState{name: name, group: s.groups[name]}
			byName[name] = g
			groups = append(groups, g)
		}
		g.pods++
		if state, _ := stateOfPod(pod); state == podBound {
			g.bound++
		}
		_, claims := s.claimsOf(pod)
		for _, claim := range claims {
			g.claims++
			if claim != nil && claim.Status.Allocation != nil {
				g.allocated++
			}
		}
	}
	slices.SortFunc(groups, func(a, b *groupState) int { return strings.Compare(a.name, b.name) })
	return groups
}

// expectedUnschedulable adds the pods of the given PodGroups to the pods
// expected to be unschedulable; nil if neither is given.
func (s *snapshot) expectedUnschedulable(pods, groups sets.Set[string]) sets.Set[string] {
	if pods == nil && groups == nil {
		return nil
	}
	want := sets.New[string]()
	want = want.Union(pods)
	for _, pod := range s.pods {
		if groups.Has(podGroupOf(pod)) {
			want.Insert(pod.Name)
		}
	}
	return want
}

// writeGroups prints what each PodGroup got.
func writeGroups(out io.Writer, groups []*groupState) {
	if len(groups) == 0 {
		return
	}
	_, _ = fmt.Fprintln(out, "PodGroups (gang scheduling: all of a gang's pods are bound, or none and none of their claims is allocated):")
	for _, g := range groups {
		policy := "no PodGroup object"
		switch {
		case g.minCount() > 0:
			policy = fmt.Sprintf("gang, minCount %d", g.minCount())
		case g.group != nil:
			policy = "basic"
		}
		condition := ""
		if g.group != nil {
			if c := meta.FindStatusCondition(g.group.Status.Conditions, minor.PodGroupScheduledCondition); c != nil {
				condition = fmt.Sprintf(", %s=%s (%s)", c.Type, c.Status, c.Reason)
			}
		}
		_, _ = fmt.Fprintf(out, "  %s (%s): %d of %d pods bound, %d of %d claims allocated%s\n",
			g.name, policy, g.bound, g.pods, g.allocated, g.claims, condition)
	}
}

// verifyGroups checks that every gang got all or nothing: at least
// minCount pods bound, or none bound and no claim of its pods allocated.
func verifyGroups(groups []*groupState) error {
	var errs []error
	for _, g := range groups {
		minCount := g.minCount()
		switch {
		case minCount == 0:
		case g.bound > 0 && g.bound < minCount:
			errs = append(errs, fmt.Errorf("PodGroup %s: %d pods bound, fewer than its minCount %d", g.name, g.bound, minCount))
		case g.bound == 0 && g.allocated > 0:
			errs = append(errs, fmt.Errorf("PodGroup %s: no pod bound, but %d of its pods' claims allocated", g.name, g.allocated))
		}
	}
	return errors.Join(errs...)
}

// report waits until the scheduler has dealt with every pod, prints the
// table and checks the result. With expected set, exactly those pods must
// end up unschedulable.
//
// With expectedGroups set, the pods of those PodGroups are expected to be
// unschedulable too; and every gang among the pods must have got all or
// nothing (verifyGroups).
func report(ctx context.Context, client kubernetes.Interface, out io.Writer, q query, expected, expectedGroups sets.Set[string], timeout time.Duration) error {
	start := time.Now()
	var s *snapshot
	last := ""
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if s, err = readSnapshot(ctx, client, q); err != nil {
			return false, err
		}
		bound, unschedulable, pending, _ := s.counts()
		progress := fmt.Sprintf("%d pods: %d bound, %d unschedulable, %d pending", len(s.pods), bound, unschedulable, pending)
		if progress != last {
			_, _ = fmt.Fprintf(out, "    %5.1fs  %s\n", time.Since(start).Seconds(), progress)
			last = progress
		}
		return s.settled(s.expectedUnschedulable(expected, expectedGroups)), nil
	})
	if s != nil {
		_, _ = fmt.Fprintln(out)
		if err := writeTable(out, s); err != nil {
			return err
		}
		_, _ = fmt.Fprintln(out)
	}
	if err != nil {
		if want := s.expectedUnschedulable(expected, expectedGroups); s != nil && want != nil {
			_, _, _, got := s.counts()
			return fmt.Errorf("pods did not settle within %s: want unschedulable %v, got %v: %w", timeout, sets.List(want), sets.List(got), err)
		}
		return fmt.Errorf("pods did not settle within %s: %w", timeout, err)
	}
	if err := verify(s); err != nil {
		return fmt.Errorf("allocations are wrong: %w", err)
	}
	groups := s.podGroups()
	if len(groups) > 0 {
		writeGroups(out, groups)
		_, _ = fmt.Fprintln(out)
		if err := verifyGroups(groups); err != nil {
			return fmt.Errorf("gang scheduling is wrong: %w", err)
		}
	}
	bound, _, _, _ := s.counts()
	_, _ = fmt.Fprintf(out, "Checked: %d pods bound, every claim allocated on its pod's node and reserved for it, no device allocated twice", bound)
	if len(groups) > 0 {
		_, _ = fmt.Fprint(out, "; every gang bound all together, or not at all and holding no device")
	}
	_, _ = fmt.Fprintln(out, ".")
	return nil
}
