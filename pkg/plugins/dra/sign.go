package dra

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/tools/cache"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/internal/minor/schedminor"
)

// signKey is the key of the plugin's fragment of a pod signature.
const signKey = Name

// claimSignature is the plugin's fragment of a pod signature: what Filter
// and Score read of a pod with claims. It is marshalled to JSON by the
// framework.
type claimSignature struct {
	// Priority decides which claim nominations count as in use for the
	// pod (nomination.go).
	Priority int32 `json:"priority"`
	// Specs are the hashes of the specs of the pod's claims, in the
	// order of pod.Spec.ResourceClaims: what the allocator allocates.
	// Not the names: the allocator's results do not depend on them.
	Specs []string `json:"specs"`
}

// SignPod lets kube-scheduler's opportunistic batching (KEP-5598) treat
// two pods alike when Filter and Score answer the same for both on every
// node but the one the first was placed on: the pods whose claims are all
// generated from templates for them alone, unallocated, not in flight,
// with the same specs, at the same priority, on a cluster whose devices
// are all local to one node. Batching reuses the first pod's ranking of the
// nodes for the next; the scheduler still runs every Filter on the node
// the next pod is given (and on the node the last one took), so a reused
// ranking never gives a pod devices that are not free: the allocator decides
// on that node with the cycle's snapshot.
//
// Every other pod with claims is unsignable: a claim by name may be shared
// and allocated already; a claim of a pod group is shared by the group's
// cycle; extended resources and devices that stand for node CPU and memory
// make Filter depend on more than the claims; a device that several nodes
// can use changes with the previous pod's allocation on nodes other than
// the one it took; and a pod with a claim nomination (nomination.go) has
// devices of its own. Pods without claims or extended resources have no
// fragment: the plugin does nothing for them.
//
// The signature is computed when the pod enters the scheduling queue and
// again when it changes (its claims' names come in its status): a pod
// whose claims are not in the claim cache yet at that moment stays
// unsignable, and is scheduled as before.
func (pl *Plugin) SignPod(ctx context.Context, pod *v1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	extended := pl.fts.EnableDRAExtendedResource && requestsExtendedResources(pod)
	if len(pod.Spec.ResourceClaims) == 0 && !extended {
		return nil, nil
	}
	sig, reason := pl.signClaims(pod, extended)
	if reason != "" {
		if loggerV := klog.FromContext(ctx).V(6); loggerV.Enabled() {
			loggerV.Info("Pod with claims not signable", "pod", klog.KObj(pod), "reason", reason)
		}
		return nil, fwk.NewStatus(fwk.Unschedulable, "pod not signable: "+reason)
	}
	return []fwk.SignFragment{{Key: signKey, Value: sig}}, nil
}

// signClaims returns the pod's fragment, or why it has none.
func (pl *Plugin) signClaims(pod *v1.Pod, extended bool) (*claimSignature, string) {
	switch {
	case extended:
		return nil, "extended resources may be backed by devices"
	case schedminor.NodeAllocatableResources(pl.fts):
		return nil, "devices may stand for node resources"
	case minor.PodGroupName(pod) != nil:
		return nil, "pod group member"
	case pl.tracker.Nominations().Get(pod.UID) != nil:
		return nil, "claim nomination"
	}
	sig := &claimSignature{Priority: corev1helpers.PodPriority(pod)}
	for i := range pod.Spec.ResourceClaims {
		entry := &pod.Spec.ResourceClaims[i]
		if entry.ResourceClaimTemplateName == nil {
			return nil, fmt.Sprintf("claim %s by name", entry.Name)
		}
		name, _, err := resourceclaim.Name(pod, entry)
		if err != nil {
			return nil, err.Error()
		}
		if name == nil {
			// No claim needed for this entry.
			continue
		}
		claim, err := pl.tracker.Claim(pod.Namespace, *name)
		if err != nil {
			return nil, fmt.Sprintf("claim %s not in the claim cache", *name)
		}
		if err := minor.IsForPod(pod, claim, false); err != nil {
			return nil, err.Error()
		}
		switch {
		case claim.DeletionTimestamp != nil:
			return nil, fmt.Sprintf("claim %s being deleted", *name)
		case claim.Status.Allocation != nil || len(claim.Status.ReservedFor) > 0:
			return nil, fmt.Sprintf("claim %s allocated or reserved", *name)
		case pl.tracker.PendingAllocation(claim.UID) != nil:
			return nil, fmt.Sprintf("claim %s in flight", *name)
		}
		hash, err := specHash(&claim.Spec)
		if err != nil {
			return nil, err.Error()
		}
		sig.Specs = append(sig.Specs, hash)
	}
	if !pl.nodeLocal.devices() {
		return nil, "devices usable from more than one node"
	}
	return sig, ""
}

// requestsExtendedResources: a container or the pod asks for a resource
// that a DeviceClass may back (extended.go). It reads the spec without
// summing requests: SignPod runs for every pod, most of which have none.
func requestsExtendedResources(pod *v1.Pod) bool {
	extended := func(lists ...v1.ResourceList) bool {
		for _, list := range lists {
			for name, quantity := range list {
				if !quantity.IsZero() && schedutil.IsDRAExtendedResourceName(name) {
					return true
				}
			}
		}
		return false
	}
	for _, containers := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range containers {
			if extended(containers[i].Resources.Requests, containers[i].Resources.Limits) {
				return true
			}
		}
	}
	return pod.Spec.Resources != nil && extended(pod.Spec.Resources.Requests, pod.Spec.Resources.Limits)
}

// specHash is a hash of a claim's spec (immutable in the API).
func specHash(spec *resourceapi.ResourceClaimSpec) (string, error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return "", fmt.Errorf("marshal claim spec: %w", err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16]), nil
}

// nodeLocality counts the ResourceSlices whose devices more than one node
// can use (no spec.nodeName: allNodes, a node selector, per-device node
// selection), from the slice informer's events: SignPod runs under the
// scheduling queue's lock, for every change of every pod, and must not
// list the slices.
type nodeLocality struct {
	registration cache.ResourceEventHandlerRegistration
	shared       atomic.Int64
}

// start counts the slices of the informer from now on.
func (l *nodeLocality) start(informer cache.SharedIndexInformer) error {
	count := func(obj any, delta int64) {
		if unknown, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = unknown.Obj
		}
		if slice, ok := obj.(*resourceapi.ResourceSlice); ok && !nodeLocal(slice) {
			l.shared.Add(delta)
		}
	}
	registration, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { count(obj, 1) },
		UpdateFunc: func(oldObj, newObj any) { count(oldObj, -1); count(newObj, 1) },
		DeleteFunc: func(obj any) { count(obj, -1) },
	})
	if err != nil {
		return fmt.Errorf("count ResourceSlices for many nodes: %w", err)
	}
	l.registration = registration
	return nil
}

// devices reports whether every device of the cluster belongs to exactly
// one node: the previous pod's allocation then changes nothing on other
// nodes. False until the informer's initial list is counted.
func (l *nodeLocality) devices() bool {
	return l.registration != nil && l.registration.HasSynced() && l.shared.Load() == 0
}

// nodeLocal: the slice's devices belong to its node only.
func nodeLocal(slice *resourceapi.ResourceSlice) bool {
	return slice.Spec.NodeName != nil && *slice.Spec.NodeName != ""
}
