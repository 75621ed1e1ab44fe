// Package invariants checks, on API objects alone, what the scheduler and
// the ResourceClaim controller must keep true about pods, claims and
// devices: no device in two claims, no claim held for a pod that is gone,
// every bound pod's claims allocated on its node and reserved for it. One
// checker serves every place that checks: the integration and fault tests
// (test/integration/framework), the demo (demo/helper), the kwok benchmarks
// (bench/kwok) and, through the demo's report, the real node.
package invariants

import (
	"cmp"
	"errors"
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
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/core"
)

// Cluster is what Check reads, as listed from the API server.
type Cluster struct {
	// Pods are the pods whose claims are checked (pending pods are passed
	// over).
	Pods []v1.Pod
	// Claims, Slices and Nodes are the cluster's: a device is in two
	// claims of any namespaces.
	Claims []resourceapi.ResourceClaim
	Slices []resourceapi.ResourceSlice
	Nodes  []v1.Node
}

// Options choose the checks that hold only where the caller knows more.
type Options struct {
	// Namespace is where Pods are from; "" means all namespaces.
	Namespace string
	// GonePods: Pods are all the pods of Namespace, so that a claim there
	// that is reserved for a pod not among them, or that was generated
	// for one and is still allocated, is held for a pod that is gone.
	// Leave it off where Pods are a subset (the benchmark's stably bound
	// pods) or where the claim controller is still catching up.
	GonePods bool
	// Unpublished: an allocated device that no slice of its pool's newest
	// generation has is a violation. Leave it off where drivers republish
	// or tests delete slices while claims still hold their devices; the
	// device is then not checked against a slice.
	Unpublished bool
}

// Check returns every violation, as errors sorted by message:
//
//   - every claim of a bound pod exists, is allocated and is reserved for
//     the pod or its PodGroup; the pod's node exists, the allocation's node
//     selector matches it, and every device of a node-local slice is on it;
//   - no device is allocated twice, except where sharing is legitimate:
//     admin access, or distinct shares (shareID) of a device that allows
//     multiple allocations, whose consumed capacity stays within the
//     device's;
//   - the allocated devices of a pool consume no more of a shared counter
//     than the pool's counter sets have (a GPU and its own MIG devices);
//   - with Options.GonePods, no claim is held for a pod that is gone;
//   - with Options.Unpublished, every allocated device is published.
//
// Devices are looked up in the newest generation of their pool
// (core.NewestPools), as the scheduler allocates from.
func Check(c Cluster, opts Options) []error {
	list := make([]*resourceapi.ResourceSlice, len(c.Slices))
	for i := range c.Slices {
		list[i] = &c.Slices[i]
	}
	pools := core.NewestPools(list)
	// In the order of their names, for messages that name claims in a
	// stable order.
	claims := slices.Clone(c.Claims)
	slices.SortFunc(claims, func(a, b resourceapi.ResourceClaim) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	var problems []string
	problems = append(problems, checkDevices(claims, pools, opts.Unpublished)...)
	problems = append(problems, checkBoundPods(c.Pods, claims, c.Nodes, pools)...)
	if opts.GonePods {
		problems = append(problems, checkGonePods(c.Pods, claims, opts.Namespace)...)
	}
	slices.Sort(problems)
	errs := make([]error, len(problems))
	for i, p := range problems {
		errs[i] = errors.New(p)
	}
	return errs
}

// device returns the published device of a result, nil if its pool's
// newest generation does not have it.
func device(pools map[core.PoolID]*core.Pool, driver, pool, name string) (*resourceapi.Device, *resourceapi.ResourceSlice) {
	p := pools[core.PoolID{Driver: driver, Pool: pool}]
	if p == nil {
		return nil, nil
	}
	return p.Device(name)
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

type counterKey struct {
	pool         core.PoolID
	set, counter string
}

// checkDevices checks that no device is allocated twice where sharing is
// not legitimate, that shares stay within capacity, and that pools stay
// within their shared counters.
func checkDevices(claims []resourceapi.ResourceClaim, pools map[core.PoolID]*core.Pool, unpublished bool) []string {
	var problems []string
	uses := map[deviceKey]*deviceUse{}
	var keys []deviceKey
	for i := range claims {
		claim := &claims[i]
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			key := deviceKey{result.Driver, result.Pool, result.Device}
			if d, _ := device(pools, key.driver, key.pool, key.device); d == nil && unpublished {
				problems = append(problems, fmt.Sprintf("claim %s got device %s, which is in no ResourceSlice of its pool's newest generation", klog.KObj(claim), key))
			}
			if ptr.Deref(result.AdminAccess, false) {
				// Admin access does not take the device from anyone.
				continue
			}
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

	counted := map[counterKey]resource.Quantity{}
	for _, key := range keys {
		use := uses[key]
		switch {
		case len(use.exclusive) > 1:
			problems = append(problems, fmt.Sprintf("device %s is allocated to %s", key, strings.Join(use.exclusive, " and ")))
		case len(use.exclusive) == 1 && len(use.shares) > 0:
			problems = append(problems, fmt.Sprintf("device %s is allocated to %s and shared by %d other allocations", key, use.exclusive[0], len(use.shares)))
		}
		d, _ := device(pools, key.driver, key.pool, key.device)
		if d == nil {
			// Its slice is gone or replaced; nothing to compare with.
			continue
		}
		if len(use.shares) > 0 {
			if !ptr.Deref(d.AllowMultipleAllocations, false) {
				problems = append(problems, fmt.Sprintf("device %s does not allow multiple allocations but is shared by %d", key, len(use.shares)))
			}
			for name, sum := range use.consumed {
				capacity, ok := d.Capacity[resourceapi.QualifiedName(name)]
				if !ok {
					problems = append(problems, fmt.Sprintf("device %s: shares consume capacity %s, which the device does not have", key, name))
				} else if sum.Cmp(capacity.Value) > 0 {
					problems = append(problems, fmt.Sprintf("device %s: shares consume %s of capacity %s, the device has %s", key, sum.String(), name, capacity.Value.String()))
				}
			}
		}
		// Each allocated device consumes its counters once, however many
		// shares it has.
		for _, consumption := range d.ConsumesCounters {
			for name, counter := range consumption.Counters {
				ck := counterKey{core.PoolID{Driver: key.driver, Pool: key.pool}, consumption.CounterSet, name}
				sum := counted[ck]
				sum.Add(counter.Value)
				counted[ck] = sum
			}
		}
	}
	for ck, sum := range counted {
		available, ok := counter(pools[ck.pool], ck.set, ck.counter)
		if !ok {
			problems = append(problems, fmt.Sprintf("pool %s: allocated devices consume counter %s/%s, which the pool does not have", ck.pool, ck.set, ck.counter))
		} else if sum.Cmp(available) > 0 {
			problems = append(problems, fmt.Sprintf("pool %s: allocated devices consume %s of counter %s/%s, the pool has %s", ck.pool, sum.String(), ck.set, ck.counter, available.String()))
		}
	}
	return problems
}

// counter is the value of a counter of the pool's shared counter sets.
func counter(p *core.Pool, set, name string) (resource.Quantity, bool) {
	for _, s := range p.Slices {
		for _, counterSet := range s.Spec.SharedCounters {
			if counterSet.Name == set {
				c, ok := counterSet.Counters[name]
				return c.Value, ok
			}
		}
	}
	return resource.Quantity{}, false
}

// checkBoundPods checks that every bound pod's claims are allocated on its
// node and reserved for it.
func checkBoundPods(pods []v1.Pod, claims []resourceapi.ResourceClaim, nodes []v1.Node, pools map[core.PoolID]*core.Pool) []string {
	byName := map[string]*resourceapi.ResourceClaim{}
	for i := range claims {
		byName[claims[i].Namespace+"/"+claims[i].Name] = &claims[i]
	}
	var problems []string
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName == "" {
			continue
		}
		j := slices.IndexFunc(nodes, func(n v1.Node) bool { return n.Name == pod.Spec.NodeName })
		var node *v1.Node
		if j < 0 {
			problems = append(problems, fmt.Sprintf("pod %s is bound to node %s, which does not exist", klog.KObj(pod), pod.Spec.NodeName))
		} else {
			node = &nodes[j]
		}
		for j := range pod.Spec.ResourceClaims {
			podClaim := &pod.Spec.ResourceClaims[j]
			name, _, err := resourceclaim.Name(pod, podClaim)
			if err != nil || name == nil {
				problems = append(problems, fmt.Sprintf("pod %s is bound but its claim %s was not created (%v)", klog.KObj(pod), podClaim.Name, err))
				continue
			}
			claim := byName[pod.Namespace+"/"+*name]
			switch {
			case claim == nil:
				problems = append(problems, fmt.Sprintf("pod %s is bound but its claim %s (%s) does not exist", klog.KObj(pod), podClaim.Name, *name))
				continue
			case claim.Status.Allocation == nil:
				problems = append(problems, fmt.Sprintf("pod %s is bound but its claim %s is not allocated", klog.KObj(pod), klog.KObj(claim)))
				continue
			case !minor.IsReservedForPod(pod, claim, true):
				// Reserved for the pod, or for its PodGroup (a PodGroup's
				// claim, DRAWorkloadResourceClaims).
				problems = append(problems, fmt.Sprintf("claim %s is not reserved for its pod %s (reservedFor %v)", klog.KObj(claim), klog.KObj(pod), claim.Status.ReservedFor))
			}
			if node == nil {
				continue
			}
			if selector := claim.Status.Allocation.NodeSelector; selector != nil {
				matches, err := nodeaffinity.NewLazyErrorNodeSelector(selector).Match(node)
				if err != nil || !matches {
					problems = append(problems, fmt.Sprintf("claim %s of pod %s: the allocation's node selector does not match the pod's node %s (%v)", klog.KObj(claim), klog.KObj(pod), node.Name, err))
				}
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				_, s := device(pools, r.Driver, r.Pool, r.Device)
				if s != nil && s.Spec.NodeName != nil && *s.Spec.NodeName != node.Name {
					problems = append(problems, fmt.Sprintf("claim %s of pod %s on node %s got device %s of node %s", klog.KObj(claim), klog.KObj(pod), node.Name, deviceKey{r.Driver, r.Pool, r.Device}, *s.Spec.NodeName))
				}
			}
		}
	}
	return problems
}

// checkGonePods checks that the namespace's claims are reserved only for
// pods that exist, and that claims generated for pods that are gone are
// deallocated.
func checkGonePods(pods []v1.Pod, claims []resourceapi.ResourceClaim, namespace string) []string {
	existing := map[types.UID]bool{}
	for _, pod := range pods {
		existing[pod.UID] = true
	}
	var problems []string
	for i := range claims {
		claim := &claims[i]
		if namespace != "" && claim.Namespace != namespace {
			continue
		}
		for _, consumer := range claim.Status.ReservedFor {
			if consumer.APIGroup == "" && consumer.Resource == "pods" && !existing[consumer.UID] {
				problems = append(problems, fmt.Sprintf("claim %s is reserved for pod %s (%s), which does not exist", klog.KObj(claim), consumer.Name, consumer.UID))
			}
		}
		if owner := metav1.GetControllerOf(claim); owner != nil && owner.APIVersion == "v1" && owner.Kind == "Pod" &&
			!existing[owner.UID] && claim.Status.Allocation != nil {
			problems = append(problems, fmt.Sprintf("claim %s is allocated, but was generated for pod %s (%s), which does not exist", klog.KObj(claim), owner.Name, owner.UID))
		}
	}
	return problems
}

// ReservedFor reports whether the claim is reserved for the consumer with
// this UID.
func ReservedFor(claim *resourceapi.ResourceClaim, uid types.UID) bool {
	return slices.ContainsFunc(claim.Status.ReservedFor, func(consumer resourceapi.ResourceClaimConsumerReference) bool {
		return consumer.UID == uid
	})
}
