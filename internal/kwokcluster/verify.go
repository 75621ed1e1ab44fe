package kwokcluster

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Cluster is what Verify checks: the objects as read from the API server
// while no scheduler was binding pods.
type Cluster struct {
	Pods   []corev1.Pod
	Claims []resourceapi.ResourceClaim
	Slices []resourceapi.ResourceSlice
	Nodes  []corev1.Node
}

// deviceID names a device across drivers and pools.
type deviceID struct{ driver, pool, device string }

func (d deviceID) String() string { return d.driver + "/" + d.pool + "/" + d.device }

// counterID names a counter of a pool's shared counter set.
type counterID struct{ driver, pool, set, counter string }

// publishedDevice is a device of the newest generation of its pool.
type publishedDevice struct {
	device *resourceapi.Device
	// nodeName is the node of a node-local slice, "" otherwise.
	nodeName string
}

// Verify checks the allocations that a scheduler made, as an observer can:
//
//   - every claim of a bound pod exists, is allocated and reserved for the
//     pod;
//   - the allocation's node selector matches the pod's node, and every
//     device of a node-local slice is on that node;
//   - every allocated device is in a ResourceSlice of its pool's newest
//     generation;
//   - no device is allocated to two claims, unless the device allows
//     multiple allocations (then the capacity that the claims consume
//     must fit the device's) or the allocation is for admin access;
//   - no shared counter is consumed beyond its value (a GPU and its own
//     MIG devices, for example).
//
// It returns one error per violation, in a stable order; none means the
// allocations are right.
func Verify(c Cluster) []error {
	var errs []error
	devices, counters := published(c.Slices)

	// Devices and counters taken by allocated claims.
	owner := map[deviceID]string{}
	consumed := map[deviceID]map[resourceapi.QualifiedName]resource.Quantity{}
	used := map[counterID]resource.Quantity{}
	claims := slices.Clone(c.Claims)
	slices.SortFunc(claims, func(a, b resourceapi.ResourceClaim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for i := range claims {
		claim := &claims[i]
		if claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			id := deviceID{r.Driver, r.Pool, r.Device}
			d, ok := devices[id]
			if !ok {
				errs = append(errs, fmt.Errorf("claim %s got device %s, which is in no ResourceSlice", klog.KObj(claim), id))
				continue
			}
			switch {
			case ptr.Deref(r.AdminAccess, false):
				// Admin access does not take the device.
				continue
			case ptr.Deref(d.device.AllowMultipleAllocations, false):
				for name, q := range r.ConsumedCapacity {
					if consumed[id] == nil {
						consumed[id] = map[resourceapi.QualifiedName]resource.Quantity{}
					}
					sum := consumed[id][name]
					sum.Add(q)
					consumed[id][name] = sum
				}
			default:
				if other, ok := owner[id]; ok {
					errs = append(errs, fmt.Errorf("device %s is allocated to claims %s and %s", id, other, klog.KObj(claim)))
				}
				owner[id] = klog.KObj(claim).String()
			}
			for _, consumption := range d.device.ConsumesCounters {
				for name, counter := range consumption.Counters {
					cid := counterID{r.Driver, r.Pool, consumption.CounterSet, name}
					sum := used[cid]
					sum.Add(counter.Value)
					used[cid] = sum
				}
			}
		}
	}
	for _, id := range sortedKeys(consumed, func(a, b deviceID) int { return cmp.Compare(a.String(), b.String()) }) {
		for _, name := range sortedKeys(consumed[id], func(a, b resourceapi.QualifiedName) int { return cmp.Compare(a, b) }) {
			sum := consumed[id][name]
			capacity, ok := devices[id].device.Capacity[name]
			if !ok || sum.Cmp(capacity.Value) > 0 {
				errs = append(errs, fmt.Errorf("device %s: claims consume %s of capacity %s, more than the device has", id, sum.String(), name))
			}
		}
	}
	for _, id := range sortedKeys(used, func(a, b counterID) int {
		return cmp.Or(cmp.Compare(a.driver, b.driver), cmp.Compare(a.pool, b.pool), cmp.Compare(a.set, b.set), cmp.Compare(a.counter, b.counter))
	}) {
		sum := used[id]
		available, ok := counters[id]
		if !ok || sum.Cmp(available) > 0 {
			errs = append(errs, fmt.Errorf("counter %s of counter set %s in pool %s/%s: allocated devices consume %s, more than its %s",
				id.counter, id.set, id.driver, id.pool, sum.String(), available.String()))
		}
	}

	// Bound pods and their claims.
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims {
		byName[claims[i].Namespace+"/"+claims[i].Name] = &claims[i]
	}
	nodes := map[string]*corev1.Node{}
	for i := range c.Nodes {
		nodes[c.Nodes[i].Name] = &c.Nodes[i]
	}
	pods := slices.Clone(c.Pods)
	slices.SortFunc(pods, func(a, b corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		node := nodes[pod.Spec.NodeName]
		if node == nil {
			errs = append(errs, fmt.Errorf("pod %s is bound to node %s, which does not exist", klog.KObj(pod), pod.Spec.NodeName))
		}
		for j := range pod.Spec.ResourceClaims {
			podClaim := &pod.Spec.ResourceClaims[j]
			name, _, err := resourceclaim.Name(pod, podClaim)
			if err != nil || name == nil {
				errs = append(errs, fmt.Errorf("pod %s is bound but its claim %s was not created", klog.KObj(pod), podClaim.Name))
				continue
			}
			claim := byName[pod.Namespace+"/"+*name]
			switch {
			case claim == nil:
				errs = append(errs, fmt.Errorf("pod %s is bound but its claim %s (%s) does not exist", klog.KObj(pod), podClaim.Name, *name))
				continue
			case claim.Status.Allocation == nil:
				errs = append(errs, fmt.Errorf("pod %s is bound but its claim %s is not allocated", klog.KObj(pod), klog.KObj(claim)))
				continue
			}
			if !resourceclaim.IsReservedForPod(pod, claim, false) {
				errs = append(errs, fmt.Errorf("claim %s is not reserved for its pod %s", klog.KObj(claim), klog.KObj(pod)))
			}
			if node == nil {
				continue
			}
			if ns := claim.Status.Allocation.NodeSelector; ns != nil {
				selector, err := nodeaffinity.NewNodeSelector(ns)
				if err != nil {
					errs = append(errs, fmt.Errorf("claim %s: node selector: %w", klog.KObj(claim), err))
				} else if !selector.Match(node) {
					errs = append(errs, fmt.Errorf("claim %s of pod %s: the allocation's node selector does not match the pod's node %s", klog.KObj(claim), klog.KObj(pod), node.Name))
				}
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				id := deviceID{r.Driver, r.Pool, r.Device}
				if d, ok := devices[id]; ok && d.nodeName != "" && d.nodeName != node.Name {
					errs = append(errs, fmt.Errorf("claim %s of pod %s on node %s got device %s of node %s", klog.KObj(claim), klog.KObj(pod), node.Name, id, d.nodeName))
				}
			}
		}
	}
	return errs
}

// published indexes the devices and shared counters of the newest
// generation of each pool.
func published(all []resourceapi.ResourceSlice) (map[deviceID]publishedDevice, map[counterID]resource.Quantity) {
	type poolID struct{ driver, pool string }
	newest := map[poolID]int64{}
	for _, s := range all {
		id := poolID{s.Spec.Driver, s.Spec.Pool.Name}
		if g, ok := newest[id]; !ok || s.Spec.Pool.Generation > g {
			newest[id] = s.Spec.Pool.Generation
		}
	}
	devices := map[deviceID]publishedDevice{}
	counters := map[counterID]resource.Quantity{}
	for i := range all {
		s := &all[i]
		if s.Spec.Pool.Generation != newest[poolID{s.Spec.Driver, s.Spec.Pool.Name}] {
			continue
		}
		for j := range s.Spec.Devices {
			d := &s.Spec.Devices[j]
			devices[deviceID{s.Spec.Driver, s.Spec.Pool.Name, d.Name}] = publishedDevice{device: d, nodeName: ptr.Deref(s.Spec.NodeName, "")}
		}
		for _, set := range s.Spec.SharedCounters {
			for name, counter := range set.Counters {
				counters[counterID{s.Spec.Driver, s.Spec.Pool.Name, set.Name, name}] = counter.Value
			}
		}
	}
	return devices, counters
}

func sortedKeys[K comparable, V any](m map[K]V, compare func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compare)
	return keys
}
