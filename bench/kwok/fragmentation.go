package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// The fragmentation cases measure placement, not speed: after a long churn
// of small pods, how much of the capacity is still whole for large ones.
//
//	fragmentation      1-, 2- and 4-GPU pods on the H100 nodes, then 8-GPU
//	                   pods: H100 nodes with all 8 GPUs free, NUMA nodes
//	                   with 4 free GPUs, 8-GPU pods placed
//	fragmentation_mig  1g, 2g and 3g MIG pods on the A100 nodes, then pods
//	                   of a whole GPU in MIG mode: GPUs with no device in
//	                   use, whole-GPU pods placed
//
// Both churns run at once, in one phase: their pods go to disjoint nodes
// (H100 and A100), so neither changes where the other's pods can go, and
// the phase takes the time of one.
//
// The churn is a plan drawn from a seed (newChurnPlan): which pods each
// step creates and deletes, lifetimes counted in steps, so that every
// scheduler gets the same sequence of creations and deletions, a slower one
// only later. Each step deletes the pods whose lifetime ended and waits
// until their claims are gone (their devices free), creates pods until the
// target share of the devices is requested again and waits until they are
// bound, then counts what is whole from the claims' allocations: the series
// of the plot, one point per step. Steps start at most one per
// FragInterval.
//
// Why NUMA nodes and not PCIe roots: the H100 inventory
// (config/inventory/h100-hgx-8.yaml) has two GPUs per PCIe root and four
// per NUMA node, so a request for 4 GPUs with matchAttribute pcieRoot never
// fits on an H100 node, idle or not. The topology group of that inventory
// that holds 4 GPUs is the NUMA node (resource.kubernetes.io/numaNode).
//
// Why whole GPUs and not 7g.40gb: the A100 inventory
// (config/inventory/a100-mig-8.yaml) publishes the MIG devices that are
// configured (as `nvidia-smi mig -lgi` lists them), not profiles that a
// driver would create on demand. 7g.40gb is configured on one GPU of each
// node (GPU 5, which no 1g, 2g or 3g device shares), so 7g pods measure
// nothing about the churn. What the churn does break is the whole GPU:
// each GPU in MIG mode is also published whole, consuming all the memory
// slices of its counter set, so it can be allocated only while none of its
// MIG devices is. The large pods ask for that: one whole GPU in MIG mode.
const (
	caseFragmentation    = "fragmentation"
	caseFragmentationMIG = "fragmentation_mig"
)

// fragmentationCase says whether a case measures placement rather than
// scheduling speed.
func fragmentationCase(name string) bool {
	return name == caseFragmentation || name == caseFragmentationMIG
}

// Sizes of the fragmentation workloads.
const (
	// largeGPUs is the size of the large pods of fragmentation: a whole
	// H100 node.
	largeGPUs = 8
	// numaRequest is the size of the request, constrained to one NUMA
	// node, whose places free_4gpu_numa counts.
	numaRequest = 4
	// numaAttribute is the standard attribute of the NUMA node.
	numaAttribute = "resource.kubernetes.io/numaNode"
)

// fragSizes are the pod sizes, in H100 GPUs, of the fragmentation churn,
// drawn with equal weight.
var fragSizes = []int{1, 2, 4}

// churnKind is one kind of pod of a fragmentation churn: the template of
// its claim, its size in the unit that the churn's target counts (H100
// GPUs, MIG memory slices) and its weight in the random choice of the next
// pod.
type churnKind struct {
	template string
	size     int
	weight   int
}

// churnPlan is the sequence of a fragmentation churn, a function of its
// seed alone: which pods each step creates and deletes.
type churnPlan struct {
	kinds []churnKind
	pods  []plannedPod
	// steps[0] creates pods up to the target; every later step first
	// deletes the pods whose lifetime ended, then creates pods until the
	// target is requested again.
	steps []churnStep
}

// plannedPod is one pod of a churn plan.
type plannedPod struct {
	kind int
	// step creates the pod, step+lifetime deletes it (if the plan goes on
	// that long).
	step, lifetime int
}

// churnStep lists the pods a step deletes and creates, as indices into
// the plan's pods, in the order of the plan.
type churnStep struct {
	deletes, creates []int
}

// newChurnPlan draws a plan of steps steps after the initial fill: pods of
// the kinds by weight, with lifetimes uniform in 1 ... 2·meanLifetime−1
// steps, keeping target (in the kinds' sizes) requested: every step ends
// with between target and target+largest size−1 requested. stream tells
// the plans of one seed apart.
func newChurnPlan(kinds []churnKind, target, steps, meanLifetime int, seed, stream uint64) churnPlan {
	p := churnPlan{kinds: kinds}
	total := 0
	for _, k := range kinds {
		total += max(k.weight, 0)
	}
	if total == 0 || target <= 0 {
		return p
	}
	pick := func(n int) int {
		for i, k := range kinds {
			if n < max(k.weight, 0) {
				return i
			}
			n -= max(k.weight, 0)
		}
		return len(kinds) - 1
	}
	maxLifetime := max(2*meanLifetime-1, 1)
	rng := rand.New(rand.NewPCG(seed, stream))
	expiring := map[int][]int{}
	requested := 0
	for s := 0; s <= steps; s++ {
		var st churnStep
		for _, i := range expiring[s] {
			st.deletes = append(st.deletes, i)
			requested -= kinds[p.pods[i].kind].size
		}
		delete(expiring, s)
		for requested < target {
			kind := pick(rng.IntN(total))
			lifetime := 1 + rng.IntN(maxLifetime)
			i := len(p.pods)
			p.pods = append(p.pods, plannedPod{kind: kind, step: s, lifetime: lifetime})
			expiring[s+lifetime] = append(expiring[s+lifetime], i)
			st.creates = append(st.creates, i)
			requested += max(kinds[kind].size, 1)
		}
		p.steps = append(p.steps, st)
	}
	return p
}

// alive returns the pods that exist after step s, in the plan's order.
func (p churnPlan) alive(s int) []int {
	var out []int
	for i, pod := range p.pods {
		if pod.step <= s && pod.step+pod.lifetime > s {
			out = append(out, i)
		}
	}
	return out
}

// requested returns the size that the pods existing after step s request.
func (p churnPlan) requested(s int) int {
	n := 0
	for _, i := range p.alive(s) {
		n += p.kinds[p.pods[i].kind].size
	}
	return n
}

// fragWorkload is one churn of the fragmentation phase.
type fragWorkload struct {
	c    *caseResult
	plan churnPlan
	// prefix names the pods (the case's name is no DNS label).
	prefix string
	// wholeFree counts what the case keeps whole in an allocation state.
	wholeFree func(sets.Set[deviceKey]) int
	// measure puts the case's counts at the end of the churn into c and
	// returns how many large pods to create: as many as the ideal.
	measure func(sets.Set[deviceKey]) int
	// largeTemplate is the template of the large pods.
	largeTemplate string
	large         []podSpec
}

func (w *fragWorkload) podName(i int) string { return fmt.Sprintf("%s-%05d", w.prefix, i) }

func (w *fragWorkload) pod(i int) podSpec {
	return podSpec{name: w.podName(i), template: w.plan.kinds[w.plan.pods[i].kind].template}
}

// fragWorkloads returns the workloads of the fragmentation cases named.
func (r *runner) fragWorkloads(names []string, all []resourceapi.ResourceSlice) ([]*fragWorkload, []caseResult) {
	var work []*fragWorkload
	var failed []caseResult
	for _, name := range names {
		c := &caseResult{Name: name}
		switch name {
		case caseFragmentation:
			fleet := h100FleetOf(all)
			var kinds []churnKind
			for _, size := range fragSizes {
				kinds = append(kinds, churnKind{template: h100Template(size), size: size, weight: 1})
			}
			target := int(float64(len(fleet.place)) * r.cfg.FragUse)
			work = append(work, &fragWorkload{
				c: c, prefix: "frag",
				plan:      newChurnPlan(kinds, target, r.cfg.FragSteps, r.cfg.FragLifetime, r.cfg.FragSeed, 1),
				wholeFree: func(a sets.Set[deviceKey]) int { return fleet.count(a).WholeFreeNodes },
				measure: func(a sets.Set[deviceKey]) int {
					n := fleet.count(a)
					c.WholeFree, c.IdealWholeFree, c.Free4GPUNUMA, c.IdealFree4GPUNUMA, c.FreeGPUs =
						n.WholeFreeNodes, n.IdealWholeFreeNodes, n.Free4GPUNUMA, n.IdealFree4GPUNUMA, n.FreeGPUs
					c.ByUse = map[string]int{}
					for used, nodes := range n.NodesByUse {
						c.ByUse[strconv.Itoa(used)] = nodes
					}
					return n.IdealWholeFreeNodes
				},
				largeTemplate: h100Template(largeGPUs),
			})
		case caseFragmentationMIG:
			fleet := migFleetOf(all)
			// The profiles weigh as many as the cluster has devices of
			// them, so that the demand is shaped like the supply: drawn
			// evenly, pods of the rare 3g.20gb would ask for more devices
			// than there are long before 70% of the memory slices are in
			// use.
			var kinds []churnKind
			total := 0
			for _, p := range fleet.churnProfiles() {
				kinds = append(kinds, churnKind{template: migTemplate(p), size: fleet.memorySlices[p], weight: fleet.devices[p]})
				total += fleet.devices[p] * fleet.memorySlices[p]
			}
			if len(kinds) == 0 {
				c.addErrors(errors.New("no MIG devices to churn"))
				failed = append(failed, *c)
				continue
			}
			target := int(float64(total) * r.cfg.FragUse)
			work = append(work, &fragWorkload{
				c: c, prefix: "fragmig",
				plan:      newChurnPlan(kinds, target, r.cfg.FragSteps, r.cfg.FragLifetime, r.cfg.FragSeed, 2),
				wholeFree: func(a sets.Set[deviceKey]) int { return fleet.count(a).WholeFreeGPUs },
				measure: func(a sets.Set[deviceKey]) int {
					n := fleet.count(a)
					c.WholeFree, c.IdealWholeFree, c.MIGInUse, c.ByUse = n.WholeFreeGPUs, n.IdealWholeFreeGPUs, n.InUse, n.GPUsByUse
					return n.IdealWholeFreeGPUs
				},
				largeTemplate: migWholeTemplate,
			})
		}
	}
	return work, failed
}

// measureFragmentation runs the churns of the fragmentation cases named,
// at once, then creates their large pods and counts those bound; it
// returns the cases' results.
func (r *runner) measureFragmentation(ctx context.Context, names []string, all []resourceapi.ResourceSlice) []caseResult {
	work, failed := r.fragWorkloads(names, all)
	results := func() []caseResult {
		out := slices.Clone(failed)
		for _, w := range work {
			out = append(out, *w.c)
		}
		slices.SortFunc(out, func(a, b caseResult) int {
			return slices.Index(caseNames, a.Name) - slices.Index(caseNames, b.Name)
		})
		return out
	}
	if len(work) == 0 {
		return results()
	}
	claims, stop, err := r.watchClaims(ctx)
	if err != nil {
		for _, w := range work {
			w.c.addErrors(err)
		}
		return results()
	}
	defer stop()
	storeClaims := func() []*resourceapi.ResourceClaim {
		var out []*resourceapi.ResourceClaim
		for _, obj := range claims.List() {
			if c, ok := obj.(*resourceapi.ResourceClaim); ok {
				out = append(out, c)
			}
		}
		return out
	}

	steps := len(work[0].plan.steps)
	start := time.Now()
	for s := range steps {
		stepStart := time.Now()
		// The pods whose lifetime ended go first, and their devices must
		// be free (their claims gone) before the step's new pods come:
		// otherwise where those go depends on how fast the claim
		// controller was, not on the scheduler.
		var deleted []string
		for _, w := range work {
			for _, i := range w.plan.steps[s].deletes {
				deleted = append(deleted, w.podName(i))
			}
		}
		if err := r.deletePods(ctx, deleted); err != nil {
			for _, w := range work {
				w.c.addErrors(err)
			}
		}
		if err := waitClaimsGone(ctx, storeClaims, deleted, r.cfg.Timeout); err != nil && ctx.Err() == nil {
			_, _ = fmt.Fprintf(r.out, "    fragmentation step %d: %v\n", s, err)
		}
		// Created in the plan's order, Workers at a time. One at a time
		// would not keep the order better: a pod is scheduled once the
		// claim controller, with workers of its own, has made its claim.
		// It would only be slower: some 20 ms a pod on 2 cores.
		var created []string
		for _, w := range work {
			pods := make([]podSpec, 0, len(w.plan.steps[s].creates))
			for _, i := range w.plan.steps[s].creates {
				pods = append(pods, w.pod(i))
			}
			if err := r.createPods(ctx, w.c.Name, pods); err != nil {
				w.c.addErrors(err)
			}
			created = append(created, podNames(pods)...)
		}
		// Pods that do not fit stay pending, the plan deletes them in
		// time; a step does not wait for them beyond FragStall.
		r.waitSettled(ctx, created, r.cfg.FragStall, r.timeout(len(created)))
		allocated := allocatedDevices(storeClaims())
		line := fmt.Sprintf("    fragmentation step %2d/%d %6.1f s:", s, steps-1, time.Since(start).Seconds())
		for _, w := range work {
			n := w.wholeFree(allocated)
			w.c.WholeFreeSeries = append(w.c.WholeFreeSeries, [2]float64{float64(s), float64(n)})
			line += fmt.Sprintf("  %s %d whole free", w.c.Name, n)
		}
		if s%5 == 0 || s == steps-1 {
			_, _ = fmt.Fprintln(r.out, line)
		}
		if ctx.Err() != nil {
			return results()
		}
		if d := time.Until(stepStart.Add(r.cfg.FragInterval)); d > 0 && s < steps-1 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return results()
			}
		}
	}
	var alive []string
	for _, w := range work {
		for _, i := range w.plan.alive(steps - 1) {
			alive = append(alive, w.podName(i))
		}
	}
	r.waitSettled(ctx, alive, r.cfg.FragStall, r.cfg.FragStall)
	seconds := time.Since(start).Seconds()
	for _, w := range work {
		names := make([]string, len(w.plan.pods))
		for i := range w.plan.pods {
			names[i] = w.podName(i)
		}
		w.c.Pods = len(names)
		w.c.Unbound = len(names) - r.tracker.countBound(names)
		w.c.Seconds = seconds
	}

	// The end of the churn, counted from the API.
	list, err := r.client.ResourceV1().ResourceClaims(r.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		for _, w := range work {
			w.c.addErrors(fmt.Errorf("list claims: %w", err))
		}
		return results()
	}
	current := make([]*resourceapi.ResourceClaim, len(list.Items))
	for i := range list.Items {
		current[i] = &list.Items[i]
	}
	allocated := allocatedDevices(current)
	var large []podSpec
	for _, w := range work {
		for i := range w.measure(allocated) {
			w.large = append(w.large, podSpec{name: fmt.Sprintf("%s-large-%04d", w.prefix, i), template: w.largeTemplate})
		}
		w.c.LargePods = len(w.large)
		large = append(large, w.large...)
	}
	// Large pods of one workload are alike: those that fit are bound
	// within moments, the others never are (no preemption, all pods have
	// the same priority).
	for _, w := range work {
		if err := r.createPods(ctx, w.c.Name+"-large", w.large); err != nil {
			w.c.addErrors(err)
		}
	}
	r.waitSettled(ctx, podNames(large), r.cfg.FragStall, r.cfg.FragLargeWait)
	for _, w := range work {
		w.c.LargePodsPlaced = r.tracker.countBound(podNames(w.large))
	}
	return results()
}
