package main

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/drasched/drasched/pkg/core"
	"github.com/drasched/drasched/pkg/driver/gpu"
)

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
	list := make([]*resourceapi.ResourceSlice, len(all))
	for i := range all {
		list[i] = &all[i]
	}
	pools := core.NewestPools(list)
	// In the order of the pools' names: callers number what they find.
	for _, id := range slices.SortedFunc(maps.Keys(pools), func(a, b core.PoolID) int { return cmp.Compare(a.Pool, b.Pool) }) {
		if id.Driver != gpu.DefaultDriverName {
			continue
		}
		for _, s := range pools[id].Slices {
			for j := range s.Spec.Devices {
				f(id.Pool, &s.Spec.Devices[j])
			}
		}
	}
}
