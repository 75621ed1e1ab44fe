// Package invariants checks, on API objects alone, what the scheduler and
// the ResourceClaim controller must keep true about pods, claims and
// devices. It has no dependencies on a running cluster, so its own tests
// are quick, and it can serve the e2e tests as well.
package invariants

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
)

// Check returns every violation of these invariants, as sentences:
//
//   - every bound pod of the namespace has all its claims allocated, on its
//     node (the allocation's node selector matches the node), and it or its
//     PodGroup is listed in each claim's status.reservedFor;
//   - no claim of the namespace is reserved for a pod that does not exist,
//     and no claim generated for a pod that does not exist is allocated;
//   - across all claims, no device is allocated twice, except where sharing
//     is legitimate: admin access, or shares (shareID) of a device that
//     allows multiple allocations, whose consumed capacity stays within the
//     device's capacity;
//   - the allocated devices of a pool consume no more of a shared counter
//     than the pool's counter set has.
//
// pods are those of the namespace; claims, nodes and slices are all of the
// cluster's. Devices are looked up in the current (highest) generation of
// their pool; a device no slice has any more is not checked against one.
func Check(namespace string, pods []v1.Pod, claims []resourceapi.ResourceClaim, nodes []v1.Node, resourceSlices []resourceapi.ResourceSlice) []string {
	nsClaims := map[string]*resourceapi.ResourceClaim{}
	for i := range claims {
		if claim := &claims[i]; claim.Namespace == namespace {
			nsClaims[claim.Name] = claim
		}
	}
	var problems []string
	problems = append(problems, checkBoundPods(pods, nsClaims, nodes)...)
	problems = append(problems, checkReservations(pods, nsClaims)...)
	problems = append(problems, checkDevices(claims, resourceSlices)...)
	return problems
}

// checkBoundPods checks that every bound pod's claims are allocated on its
// node and reserved for it.
func checkBoundPods(pods []v1.Pod, claims map[string]*resourceapi.ResourceClaim, nodes []v1.Node) []string {
	var problems []string
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		node := findNode(nodes, pod.Spec.NodeName)
		for j := range pod.Spec.ResourceClaims {
			podClaim := &pod.Spec.ResourceClaims[j]
			name, _, err := resourceclaim.Name(pod, podClaim)
			if err != nil || name == nil {
				problems = append(problems, fmt.Sprintf("bound pod %s: claim %s has no ResourceClaim (%v)", klog.KObj(pod), podClaim.Name, err))
				continue
			}
			claim := claims[*name]
			switch {
			case claim == nil:
				problems = append(problems, fmt.Sprintf("bound pod %s: ResourceClaim %s does not exist", klog.KObj(pod), *name))
			case claim.Status.Allocation == nil:
				problems = append(problems, fmt.Sprintf("bound pod %s: ResourceClaim %s is not allocated", klog.KObj(pod), *name))
			case !resourceclaim.IsReservedForPod(pod, claim, true):
				// Reserved for the pod, or for its PodGroup (a PodGroup's
				// claim, DRAWorkloadResourceClaims).
				problems = append(problems, fmt.Sprintf("bound pod %s: ResourceClaim %s is not reserved for it (reservedFor %v)", klog.KObj(pod), *name, claim.Status.ReservedFor))
			case node == nil:
				problems = append(problems, fmt.Sprintf("bound pod %s: node %s does not exist", klog.KObj(pod), pod.Spec.NodeName))
			default:
				if selector := claim.Status.Allocation.NodeSelector; selector != nil {
					matches, err := nodeaffinity.NewLazyErrorNodeSelector(selector).Match(node)
					if err != nil || !matches {
						problems = append(problems, fmt.Sprintf("bound pod %s: ResourceClaim %s is allocated for other nodes than %s (node selector %v, %v)", klog.KObj(pod), *name, node.Name, selector, err))
					}
				}
			}
		}
	}
	return problems
}

// checkReservations checks that claims are reserved only for pods that
// exist, and that claims generated for pods that are gone are deallocated.
func checkReservations(pods []v1.Pod, claims map[string]*resourceapi.ResourceClaim) []string {
	existing := map[types.UID]bool{}
	for _, pod := range pods {
		existing[pod.UID] = true
	}
	var problems []string
	for _, claim := range claims {
		for _, consumer := range claim.Status.ReservedFor {
			if consumer.APIGroup == "" && consumer.Resource == "pods" && !existing[consumer.UID] {
				problems = append(problems, fmt.Sprintf("ResourceClaim %s is reserved for pod %s (%s), which does not exist", klog.KObj(claim), consumer.Name, consumer.UID))
			}
		}
		if owner := metav1.GetControllerOf(claim); owner != nil && owner.APIVersion == "v1" && owner.Kind == "Pod" &&
			!existing[owner.UID] && claim.Status.Allocation != nil {
			problems = append(problems, fmt.Sprintf("ResourceClaim %s is allocated, but was generated for pod %s (%s), which does not exist", klog.KObj(claim), owner.Name, owner.UID))
		}
	}
	return problems
}

// deviceKey names a device the way allocation results do.
type deviceKey struct{ driver, pool, device string }

func (k deviceKey) String() string { return k.driver + "/" + k.pool + "/" + k.device }

// deviceUse collects the allocations of one device.
type deviceUse struct {
	exclusive []string                     // claims holding the device alone
	shares    map[types.UID]string         // shareID → claim
	consumed  map[string]resource.Quantity // capacity name → sum over shares
}

// checkDevices checks that no device is allocated twice where sharing is
// not legitimate, that shares stay within capacity, and that pools stay
// within their shared counters.
func checkDevices(claims []resourceapi.ResourceClaim, resourceSlices []resourceapi.ResourceSlice) []string {
	var problems []string
	uses := map[deviceKey]*deviceUse{}
	var keys []deviceKey
	for i := range claims {
		claim := &claims[i]
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				// Admin access does not take the device from anyone.
				continue
			}
			key := deviceKey{result.Driver, result.Pool, result.Device}
			use := uses[key]
			if use == nil {
				use = &deviceUse{shares: map[types.UID]string{}, consumed: map[string]resource.Quantity{}}
				uses[key] = use
				keys = append(keys, key)
			}
			owner := klog.KObj(claim).String() + " (request " + result.Request + ")"
			if result.ShareID == nil {
				use.exclusive = append(use.exclusive, owner)
				continue
			}
			if other, ok := use.shares[*result.ShareID]; ok {
				problems = append(problems, fmt.Sprintf("device %s: share %s is allocated to %s and %s", key, *result.ShareID, other, owner))
			}
			use.shares[*result.ShareID] = owner
			for name, quantity := range result.ConsumedCapacity {
				sum := use.consumed[string(name)]
				sum.Add(quantity)
				use.consumed[string(name)] = sum
			}
		}
	}

	pools := currentPools(resourceSlices)
	counted := map[counterKey]resource.Quantity{}
	for _, key := range keys {
		use := uses[key]
		switch {
		case len(use.exclusive) > 1:
			problems = append(problems, fmt.Sprintf("device %s is allocated to %s", key, strings.Join(use.exclusive, " and ")))
		case len(use.exclusive) == 1 && len(use.shares) > 0:
			problems = append(problems, fmt.Sprintf("device %s is allocated to %s and shared by %d other allocations", key, use.exclusive[0], len(use.shares)))
		}
		pool := pools[poolKey{key.driver, key.pool}]
		device := pool.device(key.device)
		if device == nil {
			// Its slice is gone or replaced; nothing to compare with.
			continue
		}
		if len(use.shares) > 0 {
			if device.AllowMultipleAllocations == nil || !*device.AllowMultipleAllocations {
				problems = append(problems, fmt.Sprintf("device %s does not allow multiple allocations but is shared by %d", key, len(use.shares)))
			}
			for name, sum := range use.consumed {
				capacity, ok := device.Capacity[resourceapi.QualifiedName(name)]
				if !ok {
					problems = append(problems, fmt.Sprintf("device %s: shares consume capacity %s, which the device does not have", key, name))
				} else if sum.Cmp(capacity.Value) > 0 {
					problems = append(problems, fmt.Sprintf("device %s: shares consume %s of capacity %s, the device has %s", key, sum.String(), name, capacity.Value.String()))
				}
			}
		}
		// Each allocated device consumes its counters once, however many
		// shares it has.
		for _, consumption := range device.ConsumesCounters {
			for name, counter := range consumption.Counters {
				ck := counterKey{poolKey{key.driver, key.pool}, consumption.CounterSet, name}
				sum := counted[ck]
				sum.Add(counter.Value)
				counted[ck] = sum
			}
		}
	}
	for ck, sum := range counted {
		available, ok := pools[ck.pool].counter(ck.set, ck.counter)
		if !ok {
			problems = append(problems, fmt.Sprintf("pool %s/%s: allocated devices consume counter %s/%s, which the pool does not have", ck.pool.driver, ck.pool.pool, ck.set, ck.counter))
		} else if sum.Cmp(available) > 0 {
			problems = append(problems, fmt.Sprintf("pool %s/%s: allocated devices consume %s of counter %s/%s, the pool has %s", ck.pool.driver, ck.pool.pool, sum.String(), ck.set, ck.counter, available.String()))
		}
	}
	slices.Sort(problems)
	return problems
}

type poolKey struct{ driver, pool string }

type counterKey struct {
	pool         poolKey
	set, counter string
}

// pool holds the slices of a pool's current (highest) generation.
type pool struct{ slices []*resourceapi.ResourceSlice }

func (p pool) device(name string) *resourceapi.Device {
	for _, slice := range p.slices {
		for i := range slice.Spec.Devices {
			if slice.Spec.Devices[i].Name == name {
				return &slice.Spec.Devices[i]
			}
		}
	}
	return nil
}

func (p pool) counter(set, name string) (resource.Quantity, bool) {
	for _, slice := range p.slices {
		for _, counterSet := range slice.Spec.SharedCounters {
			if counterSet.Name == set {
				counter, ok := counterSet.Counters[name]
				return counter.Value, ok
			}
		}
	}
	return resource.Quantity{}, false
}

// currentPools groups slices by pool, keeping only each pool's highest
// generation, as the scheduler does.
func currentPools(resourceSlices []resourceapi.ResourceSlice) map[poolKey]pool {
	pools := map[poolKey]pool{}
	generations := map[poolKey]int64{}
	for i := range resourceSlices {
		slice := &resourceSlices[i]
		key := poolKey{slice.Spec.Driver, slice.Spec.Pool.Name}
		generation, seen := generations[key]
		switch {
		case !seen || slice.Spec.Pool.Generation > generation:
			generations[key] = slice.Spec.Pool.Generation
			pools[key] = pool{slices: []*resourceapi.ResourceSlice{slice}}
		case slice.Spec.Pool.Generation == generation:
			p := pools[key]
			p.slices = append(p.slices, slice)
			pools[key] = p
		}
	}
	return pools
}

func findNode(nodes []v1.Node, name string) *v1.Node {
	i := slices.IndexFunc(nodes, func(node v1.Node) bool { return node.Name == name })
	if i < 0 {
		return nil
	}
	return &nodes[i]
}

// ReservedFor reports whether the claim is reserved for the consumer with
// this UID.
func ReservedFor(claim *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(claim.Status.ReservedFor, func(consumer resourceapi.ResourceClaimConsumerReference) bool {
		return consumer.UID == uid
	})
}
