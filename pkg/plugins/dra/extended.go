package dra

// Extended resources backed by DRA (feature DRAExtendedResource, GA in 1.37).
//
// A pod may ask for an extended resource in its containers' resources
// (example.com/gpu: 2) that no device plugin provides on a node. If a
// DeviceClass maps the name, through spec.extendedResourceName or the
// implicit deviceclass.resource.kubernetes.io/<class>, NodeResourcesFit
// leaves the resource to DRA on nodes whose allocatable lacks it, and this
// plugin must allocate devices for it, in a ResourceClaim of the pod's that
// the scheduler creates. The API effects are upstream's:
//
//   - PreFilter: the pod's requests are translated into device requests and
//     container mappings, per resource. A claim for the pod's extended
//     resources left from an earlier attempt (annotated, owned by the pod)
//     makes the pod unschedulable, and PostFilter deletes it; the next
//     attempt starts afresh.
//   - Filter: per node, the resources that the node does not provide in its
//     allocatable become the requests of one claim, allocated together with
//     the pod's other claims, so that no device is given twice.
//   - Reserve: the allocation goes in flight in the tracker under the
//     claim's placeholder UID: the claim does not exist yet.
//   - PreBind: the claim is created (generateName "<pod>-extended-resources-",
//     the annotation resource.kubernetes.io/extended-resource-claim: "true",
//     the pod as controller, the finalizer), the tracker re-keys the
//     in-flight allocation to the new UID, allocation and reservation are
//     written like for any claim, and the pod's
//     status.extendedResourceClaimStatus gets the claim's name and the
//     mappings of containers and resources to requests.
//   - Unreserve: the in-flight allocation is dropped and a created claim is
//     deleted.

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/tracker"
)

// extendedClaimName names the pod's claim for extended resources until
// PreBind creates it with a generated name.
const extendedClaimName = tracker.PlaceholderName

// extendedResources is what the plugin needs across cycles: which
// DeviceClass backs an extended resource, and the claims for extended
// resources by the UID of their pod.
type extendedResources struct {
	classes   fwk.DeviceClassResolver
	claims    cache.Indexer
	indexName string
}

// setupExtendedResources takes the scheduler's DeviceClassResolver (the
// same that NodeResourcesFit asks whether to leave a resource to DRA) or,
// without a SharedDRAManager, feeds one of its own from the DeviceClass
// informer; and indexes claims for extended resources by their pod.
func (pl *Plugin) setupExtendedResources(ctx context.Context, factory informers.SharedInformerFactory, manager fwk.SharedDRAManager, profile string) error {
	if manager != nil {
		pl.extendedResources.classes = manager.DeviceClassResolver()
	} else {
		classes := extendedresourcecache.NewExtendedResourceCache(klog.FromContext(ctx))
		if _, err := factory.Resource().V1().DeviceClasses().Informer().AddEventHandler(classes); err != nil {
			return fmt.Errorf("watch DeviceClasses for extended resources: %w", err)
		}
		pl.extendedResources.classes = classes
	}
	informer := factory.Resource().V1().ResourceClaims().Informer()
	name := "drasched-extended-resource-claims-" + profile
	if err := informer.AddIndexers(cache.Indexers{name: extendedClaimIndex}); err != nil {
		return fmt.Errorf("add claim indexer %s: %w", name, err)
	}
	pl.extendedResources.claims = informer.GetIndexer()
	pl.extendedResources.indexName = name
	return nil
}

// extendedClaimIndex indexes claims for extended resources by the UID of
// their pod.
func extendedClaimIndex(obj any) ([]string, error) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return nil, nil
	}
	if owner := extendedClaimOwner(claim); owner != nil {
		return []string{string(owner.UID)}, nil
	}
	return nil, nil
}

// extendedClaim is the pod's claim for extended resources in one scheduling
// cycle and its binding cycle.
type extendedClaim struct {
	// stale is a claim for the pod's extended resources that exists
	// already: created by an earlier attempt whose binding failed and
	// whose Unreserve could not delete it, or that the scheduler did not
	// finish before it restarted. Its allocation may no longer fit, so
	// PostFilter deletes it instead of the plugin trying to reuse it.
	stale *resourceapi.ResourceClaim
	// template is the claim without requests: namespace, generateName,
	// owner, annotation, and a placeholder UID under which the tracker
	// keeps the allocation in flight until PreBind creates the claim.
	template *resourceapi.ResourceClaim
	// resources are the pod's extended resources that DRA could back, by
	// name, with their DeviceClass (nil for those no class maps) as of
	// PreFilter, so that a class changing during the cycle changes nothing.
	resources []extendedResource
	// describe names a request for failure messages: the resource and
	// the containers that use it.
	describe map[string]string

	// mutex guards variants and nodes: Filter runs in parallel.
	mutex sync.Mutex
	// variants are the claims for the subsets of resources that nodes
	// need, keyed by the indices of those resources. Nodes needing the
	// same share one object, so the allocator's per-claim cache works
	// across nodes.
	variants map[string]*nodeClaim
	// nodes is the variant each node that Filter let through needs.
	nodes map[string]*nodeClaim

	// The binding cycle's state. Reserve, PreBind and Unreserve of one
	// pod run one after another.
	//
	// reserved is the claim as Reserve put it in flight, with the
	// allocation and the placeholder UID.
	reserved *resourceapi.ResourceClaim
	// mappings go with reserved into the pod status.
	mappings []v1.ContainerExtendedResourceRequest
	// created is the claim as PreBind created it; Unreserve deletes it.
	created *resourceapi.ResourceClaim
	// written is the claim with allocation and reservation.
	written *resourceapi.ResourceClaim
}

// extendedResource is one extended resource of the pod.
type extendedResource struct {
	name  v1.ResourceName
	class *resourceapi.DeviceClass
	// requests and mappings are what containers ask for of the resource,
	// nil without class.
	requests []resourceapi.DeviceRequest
	mappings []v1.ContainerExtendedResourceRequest
}

// nodeClaim is the claim a node needs, with the mappings for the pod.
type nodeClaim struct {
	claim    *resourceapi.ResourceClaim
	mappings []v1.ContainerExtendedResourceRequest
}

// extendedResourceNames returns the pod's extended resources with a
// nonzero request that DRA could back, sorted: names that may be extended
// resources and the implicit names of DeviceClasses. Requests are what the
// pod as a whole needs, as NodeResourcesFit computes them.
func extendedResourceNames(pod *v1.Pod) []v1.ResourceName {
	var names []v1.ResourceName
	for name, quantity := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
		if !quantity.IsZero() && schedutil.IsDRAExtendedResourceName(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// preFilterExtended sets s.extended for a pod with extended resources that
// a DeviceClass maps, and rejects the pod while an earlier claim for them
// exists.
func (pl *Plugin) preFilterExtended(logger klog.Logger, s *stateData, pod *v1.Pod) *fwk.Status {
	if !pl.fts.EnableDRAExtendedResource {
		return nil
	}
	names := extendedResourceNames(pod)
	if len(names) == 0 {
		return nil
	}
	if stale := pl.findExtendedClaim(pod); stale != nil {
		s.extended = &extendedClaim{stale: stale}
		return statusUnschedulable(logger, []string{fmt.Sprintf("resource claim %s for extended resources is left from an earlier attempt", klog.KObj(stale))}, "pod", klog.KObj(pod))
	}
	e := &extendedClaim{
		describe: map[string]string{},
		variants: map[string]*nodeClaim{},
		nodes:    map[string]*nodeClaim{},
	}
	backed := false
	for _, name := range names {
		r := extendedResource{name: name, class: pl.extendedResources.classes.GetDeviceClass(name)}
		if r.class != nil {
			backed = true
			r.requests, r.mappings = containerRequests(pod, name, r.class.Name)
			users := map[string][]string{}
			for _, m := range r.mappings {
				users[m.RequestName] = append(users[m.RequestName], strconv.Quote(m.ContainerName))
			}
			for request, containers := range users {
				noun := "container"
				if len(containers) > 1 {
					noun = "containers"
				}
				e.describe[request] = fmt.Sprintf("extended resource %s for %s %s", name, noun, strings.Join(containers, ", "))
			}
		}
		e.resources = append(e.resources, r)
	}
	if !backed {
		// Device plugins or nothing: NodeResourcesFit decides.
		return nil
	}
	e.template = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{
		Namespace:    pod.Namespace,
		Name:         extendedClaimName,
		UID:          uuid.NewUUID(),
		GenerateName: pod.Name + "-extended-resources-",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr.To(true),
		}},
		Annotations: map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"},
	}}
	s.extended = e
	return nil
}

// findExtendedClaim returns an existing claim for the pod's extended
// resources, or nil.
func (pl *Plugin) findExtendedClaim(pod *v1.Pod) *resourceapi.ResourceClaim {
	objs, err := pl.extendedResources.claims.ByIndex(pl.extendedResources.indexName, string(pod.UID))
	if err != nil {
		return nil
	}
	var found *resourceapi.ResourceClaim
	for _, obj := range objs {
		// Lowest name first: deterministic if there were several.
		if claim, ok := obj.(*resourceapi.ResourceClaim); ok && claim.Namespace == pod.Namespace && (found == nil || claim.Name < found.Name) {
			found = claim
		}
	}
	return found
}

// extendedClaimOwner returns the reference to the pod that controls a
// claim for extended resources, nil for other claims.
func extendedClaimOwner(claim *resourceapi.ResourceClaim) *metav1.OwnerReference {
	if claim == nil || claim.Annotations[resourceapi.ExtendedResourceClaimAnnotation] != "true" {
		return nil
	}
	owner := metav1.GetControllerOfNoCopy(claim)
	if owner == nil || owner.APIVersion != "v1" || owner.Kind != "Pod" {
		return nil
	}
	return owner
}

// extendedClaimPod names the pod of a claim for extended resources.
func extendedClaimPod(claim *resourceapi.ResourceClaim) (types.NamespacedName, bool) {
	owner := extendedClaimOwner(claim)
	if owner == nil {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: claim.Namespace, Name: owner.Name}, true
}

// isExtendedClaimOf: the claim is the one for the pod's extended resources.
func isExtendedClaimOf(pod *v1.Pod, claim *resourceapi.ResourceClaim) bool {
	owner := extendedClaimOwner(claim)
	return owner != nil && owner.UID == pod.UID && claim.Namespace == pod.Namespace
}

// containerRequests returns the device requests of the claim for one
// extended resource, backed by the class, and which container uses which
// request, named and sized as upstream's plugin does, because the kubelet
// reads these mappings from the pod status:
//
//   - A container that runs as long as the pod (a regular container or a
//     sidecar) gets its own request for what it asks, named
//     container-<i>-request-<j>: i is its index in init containers followed
//     by containers, j the index of the resource among the container's
//     requests sorted by name.
//   - An init container that runs to completion first uses the devices of
//     long-running containers that start after it (they are idle until
//     then), in order, and asks only for the rest under its own name.
//   - Init containers run one after another, so one request, the largest
//     rest, serves all of them; their mappings point to it.
//
// Requests come in container order, the shared one of init containers
// first; mappings of long-running containers before those of init
// containers.
func containerRequests(pod *v1.Pod, resource v1.ResourceName, class string) ([]resourceapi.DeviceRequest, []v1.ContainerExtendedResourceRequest) {
	numInit := len(pod.Spec.InitContainers)
	containers := append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...)
	runsToCompletion := func(i int) bool {
		return i < numInit && ptr.Deref(containers[i].RestartPolicy, "") != v1.ContainerRestartPolicyAlways
	}
	mapping := func(i int, request string) v1.ContainerExtendedResourceRequest {
		return v1.ContainerExtendedResourceRequest{ContainerName: containers[i].Name, ResourceName: string(resource), RequestName: request}
	}

	var longRunning, initMappings []v1.ContainerExtendedResourceRequest
	own := make([]*resourceapi.DeviceRequest, len(containers))
	for i := range containers {
		if runsToCompletion(i) {
			continue
		}
		if count := deviceCount(&containers[i], resource); count > 0 {
			own[i] = newExtendedRequest(i, &containers[i], resource, class, count)
			longRunning = append(longRunning, mapping(i, own[i].Name))
		}
	}

	var shared *resourceapi.DeviceRequest
	rests := sets.New[string]()
	for i := range numInit {
		count := deviceCount(&containers[i], resource)
		if !runsToCompletion(i) || count == 0 {
			continue
		}
		var covered int64
		for _, later := range own[i:] {
			if covered >= count {
				break
			}
			if later != nil {
				covered += later.Exactly.Count
				initMappings = append(initMappings, mapping(i, later.Name))
			}
		}
		if covered >= count {
			continue
		}
		rest := newExtendedRequest(i, &containers[i], resource, class, count-covered)
		rests.Insert(rest.Name)
		initMappings = append(initMappings, mapping(i, rest.Name))
		if shared == nil || rest.Exactly.Count > shared.Exactly.Count {
			shared = rest
		}
	}

	var requests []resourceapi.DeviceRequest
	if shared != nil {
		requests = append(requests, *shared)
		for i := range initMappings {
			if rests.Has(initMappings[i].RequestName) {
				initMappings[i].RequestName = shared.Name
			}
		}
	}
	for _, request := range own {
		if request != nil {
			requests = append(requests, *request)
		}
	}
	return requests, append(longRunning, initMappings...)
}

// deviceCount is how many devices a container asks for, 0 for none or a
// quantity that is not an integer.
func deviceCount(container *v1.Container, resource v1.ResourceName) int64 {
	quantity, ok := container.Resources.Requests[resource]
	if !ok {
		return 0
	}
	count, ok := quantity.AsInt64()
	if !ok || count < 0 {
		return 0
	}
	return count
}

func newExtendedRequest(index int, container *v1.Container, resource v1.ResourceName, class string, count int64) *resourceapi.DeviceRequest {
	names := make([]string, 0, len(container.Resources.Requests))
	for name := range container.Resources.Requests {
		names = append(names, string(name))
	}
	slices.Sort(names)
	return &resourceapi.DeviceRequest{
		Name: fmt.Sprintf("container-%d-request-%d", index, slices.Index(names, string(resource))),
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class,
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           count,
		},
	}
}

// filterExtended returns the claim that the node needs for the pod's
// extended resources: those it does not provide in its allocatable and a
// DeviceClass backs. Nil if the node needs none. The pod does not fit a
// node that neither provides nor can back one of them.
func (pl *Plugin) filterExtended(logger klog.Logger, s *stateData, pod *v1.Pod, nodeInfo fwk.NodeInfo) (*resourceapi.ResourceClaim, *fwk.Status) {
	e := s.extended
	if e == nil {
		return nil, nil
	}
	node := nodeInfo.Node()
	allocatable := nodeInfo.GetAllocatable().GetScalarResources()
	var needed []int
	for i, r := range e.resources {
		amount, provided := allocatable[r.name]
		switch {
		case r.class != nil && amount == 0:
			needed = append(needed, i)
		case !provided:
			return nil, statusUnschedulable(logger, []string{fmt.Sprintf("node does not provide extended resource %s and no DeviceClass backs it", r.name)}, "pod", klog.KObj(pod), "node", klog.KObj(node))
		}
	}
	if len(needed) == 0 {
		// Device plugins provide everything; NodeResourcesFit checks
		// the amounts.
		return nil, nil
	}
	e.mutex.Lock()
	defer e.mutex.Unlock()
	key := fmt.Sprint(needed)
	variant := e.variants[key]
	if variant == nil {
		claim := e.template.DeepCopy()
		var mappings []v1.ContainerExtendedResourceRequest
		for _, i := range needed {
			claim.Spec.Devices.Requests = append(claim.Spec.Devices.Requests, e.resources[i].requests...)
			mappings = append(mappings, e.resources[i].mappings...)
		}
		slices.SortFunc(claim.Spec.Devices.Requests, func(a, b resourceapi.DeviceRequest) int { return strings.Compare(a.Name, b.Name) })
		variant = &nodeClaim{claim: claim, mappings: mappings}
		e.variants[key] = variant
	}
	e.nodes[node.Name] = variant
	return variant.claim, nil
}

// message describes an allocator failure; one that concerns the claim for
// extended resources names the resource and its containers instead of the
// generated request.
func (e *extendedClaim) message(f allocator.Failure) string {
	if e == nil || e.template == nil || f.Claim != klog.KObj(e.template).String() {
		return f.Message()
	}
	what, ok := e.describe[f.Request]
	if !ok {
		what = "extended resources"
	}
	if f.Request == "" && f.Reason == allocator.ReasonContention {
		return what + ": requests compete for the same devices"
	}
	f.Claim, f.Request = "", ""
	return what + ": " + f.Message()
}

// reserveExtended puts the allocation of the node's claim for extended
// resources in flight. results are the allocations that Filter found on
// the node beyond the pod's claims: one if the node needs the claim.
func (pl *Plugin) reserveExtended(logger klog.Logger, s *stateData, pod *v1.Pod, nodeName string, results []resourceapi.AllocationResult) *fwk.Status {
	var variant *nodeClaim
	if e := s.extended; e != nil && e.nodes != nil {
		e.mutex.Lock()
		variant = e.nodes[nodeName]
		e.mutex.Unlock()
	}
	switch {
	case variant == nil && len(results) == 0:
		return nil
	case variant == nil || len(results) != 1:
		// Filter accepted the node, so this cannot happen.
		return statusError(logger, fmt.Errorf("internal error: %d allocations for the claim for extended resources on node %s", len(results), nodeName))
	}
	claim := variant.claim.DeepCopy()
	// PreBind creates the claim with the finalizer that protects its
	// allocation, which saves the update that adds it to other claims.
	claim.Finalizers = append(claim.Finalizers, resourceapi.Finalizer)
	claim.Status.Allocation = &results[0]
	if err := pl.tracker.Reserve(claim); err != nil {
		return statusError(logger, err, "pod", klog.KObj(pod))
	}
	s.extended.reserved, s.extended.mappings = claim, variant.mappings
	logger.V(5).Info("Allocation for extended resources in flight", "pod", klog.KObj(pod), "node", nodeName, "allocation", klog.Format(claim.Status.Allocation))
	return nil
}

// reservedExtended: Reserve put an allocation for extended resources in
// flight, which PreBind must write.
func (e *extendedClaim) reservedExtended() bool {
	return e != nil && e.reserved != nil
}

// bindExtended creates the claim for the pod's extended resources, writes
// allocation and reservation, and records claim and mappings in the pod
// status.
func (pl *Plugin) bindExtended(ctx context.Context, s *stateData, pod *v1.Pod) error {
	e := s.extended
	if !e.reservedExtended() {
		return nil
	}
	logger := klog.FromContext(ctx)
	claim := e.reserved.DeepCopy()
	claim.Name, claim.UID = "", ""
	claim.Status = resourceapi.ResourceClaimStatus{}
	created, err := pl.client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		metrics.ResourceClaimCreatesTotal.WithLabelValues(minor.ClaimCreateLabels("failure")...).Inc()
		return fmt.Errorf("create claim for extended resources of pod %s: %w", klog.KObj(pod), err)
	}
	metrics.ResourceClaimCreatesTotal.WithLabelValues(minor.ClaimCreateLabels("success")...).Inc()
	e.created = created
	logger.V(5).Info("Created claim for extended resources", "pod", klog.KObj(pod), "claim", klog.KObj(created))
	// The allocation stays in flight under the placeholder's UID until the
	// claim cache has the created claim.
	written, err := pl.writeClaim(ctx, created, e.reserved.Status.Allocation, podReference(pod), e.reserved.UID)
	if err != nil {
		return err
	}
	e.written = written

	status := pod.Status.DeepCopy()
	status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{
		RequestMappings:   e.mappings,
		ResourceClaimName: written.Name,
	}
	if err := schedutil.PatchPodStatus(ctx, pl.client, pod.Name, pod.Namespace, &pod.Status, status); err != nil {
		return fmt.Errorf("record claim %s for extended resources in the status of pod %s: %w", klog.KObj(written), klog.KObj(pod), err)
	}
	return nil
}

// boundExtended returns the claim PreBind wrote, if any, for the binding
// conditions checks.
func (e *extendedClaim) boundExtended() []*resourceapi.ResourceClaim {
	if e == nil || e.written == nil {
		return nil
	}
	return []*resourceapi.ResourceClaim{e.written}
}

// extendedReadyForBinding is podReadyForBinding for the claim for extended
// resources.
func (pl *Plugin) extendedReadyForBinding(s *stateData) (bool, error) {
	e := s.extended
	if e == nil || e.written == nil {
		return true, nil
	}
	// The informer may not know the new claim yet; then the written
	// version is the latest known.
	if latest, err := pl.tracker.Claim(e.written.Namespace, e.written.Name); err == nil && latest.UID == e.written.UID {
		e.written = latest
	}
	ready, err := readyForBinding(e.written)
	if err != nil || ready {
		return ready, err
	}
	if pl.bindingTimedOut(e.written) {
		return false, fmt.Errorf("%w: claim %s", errBindingTimeout, klog.KObj(e.written))
	}
	return false, nil
}

// unreserveExtended drops the allocation in flight and deletes a claim
// that PreBind created. The next attempt's PreFilter finds a claim that
// could not be deleted, and its PostFilter tries again.
func (pl *Plugin) unreserveExtended(ctx context.Context, s *stateData, pod *v1.Pod) {
	e := s.extended
	if !e.reservedExtended() {
		return
	}
	logger := klog.FromContext(ctx)
	if pl.tracker.Unreserve(e.reserved.UID) {
		logger.V(5).Info("Dropped allocation for extended resources in flight", "pod", klog.KObj(pod))
	}
	if e.created != nil {
		claim := e.created
		if e.written != nil {
			claim = e.written
		}
		if err := pl.deleteExtendedClaim(ctx, claim); err != nil {
			logger.Error(err, "Delete claim for extended resources", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
		} else {
			logger.V(5).Info("Deleted claim for extended resources", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
		}
	}
	e.reserved, e.mappings, e.created, e.written = nil, nil, nil, nil
}

// postFilterExtended deletes a claim for extended resources left from an
// earlier attempt, which made PreFilter reject the pod. Its deletion
// requeues the pod.
func (pl *Plugin) postFilterExtended(ctx context.Context, s *stateData, pod *v1.Pod) *fwk.Status {
	if s.extended == nil || s.extended.stale == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	claim := s.extended.stale
	if err := pl.deleteExtendedClaim(ctx, claim); err != nil {
		return statusError(logger, err, "pod", klog.KObj(pod))
	}
	logger.V(5).Info("Deleted claim for extended resources from an earlier attempt", "pod", klog.KObj(pod), "claim", klog.KObj(claim))
	return fwk.NewStatus(fwk.Unschedulable, "deletion of ResourceClaim completed")
}

// deleteExtendedClaim deletes a claim for extended resources of a pod that
// is not bound. The finalizer comes off first: without it, the claim
// would wait for the ResourceClaim controller to deallocate it, which it
// does only for claims of pods that are gone or done, and its devices
// would stay taken. No kubelet uses them.
func (pl *Plugin) deleteExtendedClaim(ctx context.Context, claim *resourceapi.ResourceClaim) error {
	claims := pl.client.ResourceV1().ResourceClaims(claim.Namespace)
	refresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if refresh {
			latest, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if latest.UID != claim.UID {
				return apierrors.NewNotFound(resourceapi.Resource("resourceclaims"), claim.Name)
			}
			claim = latest
		}
		refresh = true
		index := slices.Index(claim.Finalizers, resourceapi.Finalizer)
		if index < 0 {
			return nil
		}
		claim = claim.DeepCopy()
		claim.Finalizers = slices.Delete(claim.Finalizers, index, index+1)
		_, err := claims.Update(ctx, claim, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove finalizer from claim %s: %w", klog.KObj(claim), err)
	}
	err = claims.Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &claim.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete claim %s: %w", klog.KObj(claim), err)
	}
	return nil
}

// classBacksExtendedResource: one of the classes maps one of the pod's
// extended resources, explicitly or by its implicit name. Given the old
// and the new version of a class, a mapping that goes away counts too: the
// resource may now be left to a device plugin.
func classBacksExtendedResource(pod *v1.Pod, classes ...*resourceapi.DeviceClass) bool {
	names := extendedResourceNames(pod)
	for _, class := range classes {
		if class == nil {
			continue
		}
		for _, name := range names {
			if string(name) == resourceapi.ResourceDeviceClassPrefix+class.Name ||
				class.Spec.ExtendedResourceName != nil && string(name) == *class.Spec.ExtendedResourceName {
				return true
			}
		}
	}
	return false
}

// sliceServesExtendedResource: a device in the slices matches the class
// of one of the pod's extended resources.
func (pl *Plugin) sliceServesExtendedResource(pod *v1.Pod, pool []*resourceapi.ResourceSlice, budget *allocator.CostBudget) (bool, error) {
	for _, name := range extendedResourceNames(pod) {
		class := pl.extendedResources.classes.GetDeviceClass(name)
		if class == nil {
			continue
		}
		match, err := pl.anyDeviceMatches(requestSelector{class: class.Name}, pool, budget)
		if err != nil || match {
			return match, err
		}
	}
	return false, nil
}
