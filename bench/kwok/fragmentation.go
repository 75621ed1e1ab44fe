package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu"
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

// deviceKey names a device of the GPU driver: its pool (the node) and name.
type deviceKey struct{ pool, device string }

// allocatedDevices returns the GPU driver's devices that the claims have
// been allocated.
func allocatedDevices(claims []*resourceapi.ResourceClaim) sets.Set[deviceKey] {
	out := sets.New[deviceKey]()
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == gpu.DefaultDriverName {
				out.Insert(deviceKey{r.Pool, r.Device})
			}
		}
	}
	return out
}

// attribute returns a device attribute of the GPU driver as a string
// ("" if the device has none), whatever its type.
func attribute(d *resourceapi.Device, name resourceapi.QualifiedName) string {
	a, ok := d.Attributes[name]
	if !ok {
		return ""
	}
	switch {
	case a.StringValue != nil:
		return *a.StringValue
	case a.IntValue != nil:
		return strconv.FormatInt(*a.IntValue, 10)
	case a.BoolValue != nil:
		return strconv.FormatBool(*a.BoolValue)
	case a.VersionValue != nil:
		return *a.VersionValue
	}
	return ""
}

// h100Fleet is where the cluster's H100 GPUs are: the node (pool) and NUMA
// node of each, from the ResourceSlices.
type h100Fleet struct {
	place map[deviceKey]h100Place
	// perNode and perNUMA count the GPUs of each node and of each NUMA
	// node.
	perNode map[string]int
	perNUMA map[h100Place]int
}

// h100Place is a NUMA node of a node; a GPU without the attribute is on a
// NUMA node of its own.
type h100Place struct{ node, numa string }

func h100FleetOf(all []resourceapi.ResourceSlice) h100Fleet {
	f := h100Fleet{place: map[deviceKey]h100Place{}, perNode: map[string]int{}, perNUMA: map[h100Place]int{}}
	eachDevice(all, func(pool string, d *resourceapi.Device) {
		if attribute(d, "type") != "gpu" || attribute(d, "productName") != productH100 {
			return
		}
		numa := attribute(d, numaAttribute)
		if numa == "" {
			numa = "device " + d.Name
		}
		p := h100Place{pool, numa}
		f.place[deviceKey{pool, d.Name}] = p
		f.perNode[pool]++
		f.perNUMA[p]++
	})
	return f
}

// h100Counts is what fragmentation counts in an allocation state.
type h100Counts struct {
	GPUs, FreeGPUs int
	// WholeFreeNodes have all their GPUs free; IdealWholeFreeNodes is how
	// many would if the GPUs in use were packed perfectly: with pods of
	// 1, 2 and 4 GPUs on nodes of 8, every free 8 GPUs make a free node.
	WholeFreeNodes, IdealWholeFreeNodes int
	// Free4GPUNUMA counts the places for numaRequest GPUs on one NUMA
	// node (a NUMA node with 4 free GPUs holds one), IdealFree4GPUNUMA
	// those of a perfect packing.
	Free4GPUNUMA, IdealFree4GPUNUMA int
	// NodesByUse counts the nodes by GPUs in use: where the pods went.
	NodesByUse map[int]int
}

func (f h100Fleet) count(allocated sets.Set[deviceKey]) h100Counts {
	usedNode := map[string]int{}
	usedNUMA := map[h100Place]int{}
	c := h100Counts{GPUs: len(f.place)}
	for k, p := range f.place {
		if allocated.Has(k) {
			usedNode[p.node]++
			usedNUMA[p]++
		}
	}
	used := 0
	perNode := 0
	c.NodesByUse = map[int]int{}
	for node, n := range f.perNode {
		c.NodesByUse[usedNode[node]]++
		if usedNode[node] == 0 {
			c.WholeFreeNodes++
		}
		used += usedNode[node]
		perNode = max(perNode, n)
	}
	c.FreeGPUs = c.GPUs - used
	places := 0
	for g, n := range f.perNUMA {
		c.Free4GPUNUMA += (n - usedNUMA[g]) / numaRequest
		places += n / numaRequest
	}
	if perNode > 0 {
		// The nodes are alike (8 GPUs each): a perfect packing leaves
		// floor(free/8) of them whole.
		c.IdealWholeFreeNodes = min(c.FreeGPUs/perNode, len(f.perNode))
	}
	c.IdealFree4GPUNUMA = min(c.FreeGPUs/numaRequest, places)
	return c
}

// migFleet is the cluster's GPUs in MIG mode and their MIG devices, from
// the ResourceSlices.
type migFleet struct {
	// layouts are the MIG devices of each GPU, by profile.
	layouts []map[string]int
	// gpuOf maps a GPU's devices, whole and MIG, to its index in layouts.
	gpuOf map[deviceKey]int
	// profile of each MIG device.
	profile map[deviceKey]string
	// devices and memorySlices (of one device) by profile.
	devices      map[string]int
	memorySlices map[string]int
}

func migFleetOf(all []resourceapi.ResourceSlice) migFleet {
	f := migFleet{gpuOf: map[deviceKey]int{}, profile: map[deviceKey]string{}, devices: map[string]int{}, memorySlices: map[string]int{}}
	byUUID := map[deviceKey]int{} // (pool, GPU UUID) -> index
	eachDevice(all, func(pool string, d *resourceapi.Device) {
		if attribute(d, "type") != "gpu" || attribute(d, "migEnabled") != "true" {
			return
		}
		byUUID[deviceKey{pool, attribute(d, "uuid")}] = len(f.layouts)
		f.gpuOf[deviceKey{pool, d.Name}] = len(f.layouts)
		f.layouts = append(f.layouts, map[string]int{})
	})
	eachDevice(all, func(pool string, d *resourceapi.Device) {
		if attribute(d, "type") != "mig" {
			return
		}
		i, ok := byUUID[deviceKey{pool, attribute(d, "parentUUID")}]
		if !ok {
			return
		}
		p := attribute(d, "profile")
		key := deviceKey{pool, d.Name}
		f.gpuOf[key] = i
		f.profile[key] = p
		f.layouts[i][p]++
		f.devices[p]++
		if q, ok := d.Capacity["memorySlices"]; ok {
			f.memorySlices[p] = int(q.Value.Value())
		}
	})
	return f
}

// churnProfiles are the profiles that fragmentation_mig churns: all but
// those of the most memory slices (7g.40gb on A100 40GB, the whole GPU as
// one MIG device), sorted.
func (f migFleet) churnProfiles() []string {
	most := 0
	for _, n := range f.memorySlices {
		most = max(most, n)
	}
	var out []string
	for p := range f.devices {
		if f.memorySlices[p] > 0 && f.memorySlices[p] < most {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// migCounts is what fragmentation_mig counts in an allocation state.
type migCounts struct {
	GPUs int
	// WholeFreeGPUs have no device in use, neither MIG devices nor the
	// whole GPU; IdealWholeFreeGPUs is how many would if the MIG devices
	// in use were moved to as few GPUs as the configured MIG devices
	// allow (minGPUs).
	WholeFreeGPUs, IdealWholeFreeGPUs int
	// InUse counts the MIG devices in use by profile.
	InUse map[string]int
	// GPUsByUse counts the GPUs by MIG memory slices in use ("whole" for
	// a whole GPU in use): where the pods went.
	GPUsByUse map[string]int
}

func (f migFleet) count(allocated sets.Set[deviceKey]) migCounts {
	c := migCounts{GPUs: len(f.layouts), InUse: map[string]int{}, GPUsByUse: map[string]int{}}
	touched := make([]bool, len(f.layouts))
	whole := make([]bool, len(f.layouts))
	slicesUsed := make([]int, len(f.layouts))
	for k := range allocated {
		i, ok := f.gpuOf[k]
		if !ok {
			continue
		}
		touched[i] = true
		if p, ok := f.profile[k]; ok {
			c.InUse[p]++
			slicesUsed[i] += f.memorySlices[p]
		} else {
			whole[i] = true
		}
	}
	for i := range f.layouts {
		if whole[i] {
			c.GPUsByUse["whole"]++
		} else {
			c.GPUsByUse[strconv.Itoa(slicesUsed[i])]++
		}
	}
	var layouts []map[string]int
	wholeUsed, upper := 0, 0
	for i := range f.layouts {
		if !touched[i] {
			c.WholeFreeGPUs++
		}
		if whole[i] {
			// The whole GPU in use holds no MIG device.
			wholeUsed++
			continue
		}
		layouts = append(layouts, f.layouts[i])
		if touched[i] {
			upper++
		}
	}
	c.IdealWholeFreeGPUs = c.GPUs - wholeUsed - minGPUs(layouts, c.InUse, upper)
	return c
}

// minGPUs returns the fewest GPUs, of the layouts given (each a GPU's MIG
// devices by profile), whose MIG devices hold demand (MIG devices by
// profile); upper is a number of GPUs known to hold it, which the search
// only has to beat. GPUs with the same layout are interchangeable, so it
// searches how many of each layout to take, the most common layout last
// (its count follows from what is left), pruning by upper and by a lower
// bound.
func minGPUs(layouts []map[string]int, demand map[string]int, upper int) int {
	var profiles []string
	for p, n := range demand {
		if n > 0 {
			profiles = append(profiles, p)
		}
	}
	if len(profiles) == 0 {
		return 0
	}
	slices.Sort(profiles)
	type group struct {
		capa []int
		n    int
	}
	byKey := map[string]*group{}
	for _, l := range layouts {
		capa := make([]int, len(profiles))
		useful := false
		for j, p := range profiles {
			capa[j] = l[p]
			useful = useful || l[p] > 0
		}
		if !useful {
			continue
		}
		key := fmt.Sprint(capa)
		if byKey[key] == nil {
			byKey[key] = &group{capa: capa}
		}
		byKey[key].n++
	}
	groups := make([]*group, 0, len(byKey))
	for _, g := range byKey {
		groups = append(groups, g)
	}
	if len(groups) == 0 {
		return upper
	}
	slices.SortFunc(groups, func(a, b *group) int {
		return cmp.Or(cmp.Compare(a.n, b.n), slices.Compare(a.capa, b.capa))
	})
	// most[i][j] is the most devices of profile j that one GPU of groups
	// i... holds: the lower bound of what is left.
	most := make([][]int, len(groups)+1)
	most[len(groups)] = make([]int, len(profiles))
	for i := len(groups) - 1; i >= 0; i-- {
		most[i] = slices.Clone(most[i+1])
		for j := range profiles {
			most[i][j] = max(most[i][j], groups[i].capa[j])
		}
	}
	need := func(rem []int, i int) (int, bool) {
		n := 0
		for j, r := range rem {
			if r <= 0 {
				continue
			}
			if most[i][j] == 0 {
				return 0, false
			}
			n = max(n, (r+most[i][j]-1)/most[i][j])
		}
		return n, true
	}
	best := upper
	rem := make([]int, len(profiles))
	for j, p := range profiles {
		rem[j] = demand[p]
	}
	var search func(i, used int, rem []int)
	search = func(i, used int, rem []int) {
		bound, ok := need(rem, i)
		if !ok || used+bound >= best {
			return
		}
		if i == len(groups)-1 {
			// The last group: as many GPUs as what is left needs.
			if bound <= groups[i].n {
				best = used + bound
			}
			return
		}
		next := make([]int, len(rem))
		for x := 0; x <= groups[i].n; x++ {
			done := true
			for j := range rem {
				next[j] = rem[j] - x*groups[i].capa[j]
				done = done && next[j] <= 0
			}
			if done {
				best = min(best, used+x)
				return
			}
			search(i+1, used+x, slices.Clone(next))
		}
	}
	search(0, 0, rem)
	return best
}

// eachDevice calls f for every device of the GPU driver in the newest
// generation of its pool.
func eachDevice(all []resourceapi.ResourceSlice, f func(pool string, d *resourceapi.Device)) {
	newest := map[string]int64{}
	for _, s := range all {
		if g, ok := newest[s.Spec.Pool.Name]; !ok || s.Spec.Pool.Generation > g {
			newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
		}
	}
	for i := range all {
		s := &all[i]
		if s.Spec.Driver != gpu.DefaultDriverName || s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		for j := range s.Spec.Devices {
			f(s.Spec.Pool.Name, &s.Spec.Devices[j])
		}
	}
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

// watchClaims returns the store of a claim informer of the namespace.
func (r *runner) watchClaims(ctx context.Context) (cache.Store, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithNamespace(r.cfg.Namespace))
	informer := factory.Resource().V1().ResourceClaims().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		cancel()
		factory.Shutdown()
		return nil, nil, errors.New("claim informer did not sync")
	}
	return informer.GetStore(), func() {
		cancel()
		factory.Shutdown()
	}, nil
}

// waitClaimsGone waits until no claim owned by one of the pods is left.
func waitClaimsGone(ctx context.Context, claims func() []*resourceapi.ResourceClaim, pods []string, limit time.Duration) error {
	if len(pods) == 0 {
		return nil
	}
	gone := sets.New(pods...)
	deadline := time.Now().Add(limit)
	for {
		left := 0
		for _, c := range claims() {
			for _, o := range c.OwnerReferences {
				if o.Kind == "Pod" && gone.Has(o.Name) {
					left++
					break
				}
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d claims of %d deleted pods left after %s", left, len(pods), limit)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// deletePods deletes the pods at once, with no grace period.
func (r *runner) deletePods(ctx context.Context, names []string) error {
	work := make(chan string)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range max(1, r.cfg.Workers) {
		wg.Go(func() {
			for name := range work {
				err := r.client.CoreV1().Pods(r.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
				if err != nil && !apierrors.IsNotFound(err) {
					mu.Lock()
					errs = append(errs, fmt.Errorf("delete pod %s: %w", name, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, name := range names {
		work <- name
	}
	close(work)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d pods not deleted: %w", len(errs), len(names), errs[0])
	}
	return nil
}

// waitSettled waits until the tracker has seen all pods bound, or none of
// them has been bound for stall, or limit has passed, and returns how many
// are bound. Here pods that do not fit are a result, not an error.
func (r *runner) waitSettled(ctx context.Context, names []string, stall, limit time.Duration) int {
	start := time.Now()
	last, lastBound := start, -1
	for {
		bound := r.tracker.countBound(names)
		if bound != lastBound {
			last, lastBound = time.Now(), bound
		}
		if bound == len(names) || time.Since(last) >= stall || time.Since(start) >= limit {
			return bound
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return bound
		}
	}
}
