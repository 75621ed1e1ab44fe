// Package kueue reads what Kueue says about quota, for kubectl drasched:
// the admission of the Workload a pod belongs to (explain) and a
// ClusterQueue's quota and usage (fit), and counts a pod's devices against
// quota as Kueue does. Kueue admits a workload by counts of devices per
// DeviceClass; drasched places the devices themselves: a workload can be
// admitted and still fit on no node, and the tools say both.
//
// It reads Kueue's objects (kueue.x-k8s.io/v1beta2, the fields of Kueue
// v0.17) as unstructured with the dynamic client, so that drasched does not
// depend on Kueue's module. Where the API server does not serve them
// (Kueue is not installed), Admission answers nil, as for a pod Kueue does
// not manage, and ClusterQueue returns ErrNotServed.
package kueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/drasched/drasched/pkg/capacity"
)

// GroupVersion is the version of Kueue's API read here.
var GroupVersion = schema.GroupVersion{Group: "kueue.x-k8s.io", Version: "v1beta2"}

// The resources read.
var (
	Workloads     = GroupVersion.WithResource("workloads")
	ClusterQueues = GroupVersion.WithResource("clusterqueues")
)

// ErrNotServed marks a cluster whose API server does not serve Kueue's
// API: Kueue is not installed, or not in this version.
var ErrNotServed = errors.New("the API server does not serve kueue.x-k8s.io/v1beta2 (is Kueue v0.17 or later installed?)")

// Reader reads Kueue's objects. Its methods are safe for concurrent use
// where its clients are.
type Reader struct {
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
}

// served says whether the API server serves the resource of Kueue's API.
func (r *Reader) served(resource schema.GroupVersionResource) (bool, error) {
	list, err := r.Discovery.ServerResourcesForGroupVersion(resource.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ask the API server whether it serves %s: %w", resource.GroupResource(), err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource.Resource }), nil
}

// Admission is what Kueue did with the Workload of a pod's Job.
type Admission struct {
	// Workload is "namespace/name".
	Workload string `json:"workload"`
	// LocalQueue is the workload's queue (spec.queueName).
	LocalQueue string `json:"localQueue,omitempty"`
	// ClusterQueue is the queue whose quota it holds
	// (status.admission.clusterQueue); empty while it holds none.
	ClusterQueue string `json:"clusterQueue,omitempty"`
	// Admitted: its Admitted condition is True. Reason and Message are
	// that condition's or, for a workload never admitted (which has no
	// such condition), its QuotaReserved condition's: why Kueue waits.
	Admitted bool   `json:"admitted"`
	Reason   string `json:"reason,omitempty"`
	Message  string `json:"message,omitempty"`
	// PodSets are the quota it holds, per pod set
	// (status.admission.podSetAssignments).
	PodSets []PodSetQuota `json:"podSets,omitempty"`
}

// PodSetQuota is the quota one pod set of a workload holds.
type PodSetQuota struct {
	Name string `json:"name"`
	// Count is the pods the quota is for.
	Count int64 `json:"count,omitempty"`
	// Resources are all of the pod set's pods take, by name.
	Resources []ResourceUsage `json:"resources,omitempty"`
}

// ResourceUsage is the quota of one resource and the flavor it is from.
type ResourceUsage struct {
	Name     string            `json:"name"`
	Quantity resource.Quantity `json:"quantity"`
	Flavor   string            `json:"flavor,omitempty"`
}

// Admission finds the Workload of the pod's Job, the one whose
// ownerReferences name the Job, and says what Kueue did with it. It asks
// the API server nothing for a pod whose controller is not a batch/v1 Job,
// and returns nil where the API server does not serve Kueue's workloads or
// no Workload belongs to the Job (Kueue does not manage it). Kueue's plain
// pod and other integrations are not looked at. A refused list is not an
// error: note says what is left out, as capacity.Read's notes do.
func (r *Reader) Admission(ctx context.Context, pod *v1.Pod) (a *Admission, note string, err error) {
	owner := metav1.GetControllerOf(pod)
	if owner == nil || owner.APIVersion != "batch/v1" || owner.Kind != "Job" {
		return nil, "", nil
	}
	if served, err := r.served(Workloads); err != nil || !served {
		return nil, "", err
	}
	list, err := r.Dynamic.Resource(Workloads).Namespace(pod.Namespace).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsForbidden(err):
		return nil, fmt.Sprintf("Kueue's admission of the pod's workload not shown (%v)", err), nil
	case err != nil:
		return nil, "", fmt.Errorf("list %s in %s: %w", Workloads.GroupResource(), pod.Namespace, err)
	}
	var found *unstructured.Unstructured
	for i := range list.Items {
		wl := &list.Items[i]
		if slices.ContainsFunc(wl.GetOwnerReferences(), func(o metav1.OwnerReference) bool { return o.UID == owner.UID }) &&
			(found == nil || preferred(wl, found)) {
			found = wl
		}
	}
	if found == nil {
		return nil, "", nil
	}
	if a, err = parseWorkload(found); err != nil {
		return nil, "", fmt.Errorf("workload %s/%s: %w", found.GetNamespace(), found.GetName(), err)
	}
	return a, "", nil
}

// preferred: of two Workloads of one Job (Kueue replaces one it is
// finishing with), the one not being deleted, then the newer.
func preferred(a, b *unstructured.Unstructured) bool {
	if (a.GetDeletionTimestamp() == nil) != (b.GetDeletionTimestamp() == nil) {
		return a.GetDeletionTimestamp() == nil
	}
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return tb.Before(&ta)
	}
	return a.GetName() > b.GetName()
}

func parseWorkload(wl *unstructured.Unstructured) (*Admission, error) {
	a := &Admission{Workload: wl.GetNamespace() + "/" + wl.GetName()}
	a.LocalQueue, _, _ = unstructured.NestedString(wl.Object, "spec", "queueName")
	a.ClusterQueue, _, _ = unstructured.NestedString(wl.Object, "status", "admission", "clusterQueue")
	conditions, _, _ := unstructured.NestedSlice(wl.Object, "status", "conditions")
	status, reason, message := condition(conditions, "Admitted")
	if status == "" {
		_, reason, message = condition(conditions, "QuotaReserved")
	}
	a.Admitted, a.Reason, a.Message = status == string(metav1.ConditionTrue), reason, message
	assignments, _, _ := unstructured.NestedSlice(wl.Object, "status", "admission", "podSetAssignments")
	for _, item := range assignments {
		m, _ := item.(map[string]any)
		ps := PodSetQuota{Name: str(m, "name")}
		ps.Count, _, _ = unstructured.NestedInt64(m, "count")
		flavors, _, _ := unstructured.NestedStringMap(m, "flavors")
		usage, _, _ := unstructured.NestedMap(m, "resourceUsage")
		for name, value := range usage {
			q, err := parseQuantity(value)
			if err != nil {
				return nil, fmt.Errorf("pod set %s, resourceUsage %s: %w", ps.Name, name, err)
			}
			ps.Resources = append(ps.Resources, ResourceUsage{Name: name, Quantity: q, Flavor: flavors[name]})
		}
		sort.Slice(ps.Resources, func(i, j int) bool { return ps.Resources[i].Name < ps.Resources[j].Name })
		a.PodSets = append(a.PodSets, ps)
	}
	return a, nil
}

// condition returns the status, reason and message of a condition; an
// empty status where there is none of the type.
func condition(conditions []any, conditionType string) (status, reason, message string) {
	for _, c := range conditions {
		m, _ := c.(map[string]any)
		if str(m, "type") == conditionType {
			return str(m, "status"), str(m, "reason"), str(m, "message")
		}
	}
	return "", "", ""
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// parseQuantity reads a resource.Quantity of an unstructured object: a
// string, or a number where the CRD allows integers (x-kubernetes-int-or-string).
func parseQuantity(v any) (resource.Quantity, error) {
	switch v := v.(type) {
	case nil:
		return resource.Quantity{}, nil
	case string:
		return resource.ParseQuantity(v)
	case int64:
		return *resource.NewQuantity(v, resource.DecimalSI), nil
	case float64:
		return resource.ParseQuantity(strconv.FormatFloat(v, 'f', -1, 64))
	}
	return resource.Quantity{}, fmt.Errorf("%v is not a quantity", v)
}

// ClusterQueue is the quota of a ClusterQueue and what of it is used.
type ClusterQueue struct {
	Name string
	// Cohort is the cohort it may borrow from (spec.cohortName).
	Cohort string
	// Groups are its resourceGroups.
	Groups []ResourceGroup
}

// ResourceGroup is resources whose quota comes from one flavor for all
// the pods of a workload's pod set, tried in order.
type ResourceGroup struct {
	Covered []string
	Flavors []FlavorQuota
}

// FlavorQuota is a flavor's quota in a resource group.
type FlavorQuota struct {
	Name      string
	Resources []Quota
}

// Quota is the quota of one resource in one flavor, and its use.
type Quota struct {
	Name    string
	Nominal resource.Quantity
	// BorrowingLimit is nil where the queue may borrow whatever its
	// cohort leaves unused.
	BorrowingLimit *resource.Quantity
	// InUse and Borrowed are the status's total and borrowed: of
	// flavorsUsage (admitted workloads) or flavorsReservation (quota
	// reserved, admission checks pending included), the larger.
	InUse, Borrowed resource.Quantity
}

// ClusterQueue reads a ClusterQueue. The error wraps ErrNotServed where the
// API server does not serve Kueue's API, and capacity.ErrNotFound where
// there is no such queue.
func (r *Reader) ClusterQueue(ctx context.Context, name string) (*ClusterQueue, error) {
	served, err := r.served(ClusterQueues)
	if err != nil {
		return nil, err
	}
	if !served {
		return nil, fmt.Errorf("ClusterQueue %s: %w", name, ErrNotServed)
	}
	u, err := r.Dynamic.Resource(ClusterQueues).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("ClusterQueue %s: %w", name, capacity.ErrNotFound)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("get ClusterQueue %s: %w (--cluster-queue needs get on %s)", name, err, ClusterQueues.GroupResource())
	case err != nil:
		return nil, fmt.Errorf("get ClusterQueue %s: %w", name, err)
	}
	cq, err := parseClusterQueue(u)
	if err != nil {
		return nil, fmt.Errorf("ClusterQueue %s: %w", name, err)
	}
	return cq, nil
}

func parseClusterQueue(u *unstructured.Unstructured) (*ClusterQueue, error) {
	cq := &ClusterQueue{Name: u.GetName()}
	cq.Cohort, _, _ = unstructured.NestedString(u.Object, "spec", "cohortName")
	// Use per flavor/resource, the larger of the two lists.
	type use struct{ total, borrowed resource.Quantity }
	used := map[string]*use{}
	for _, field := range []string{"flavorsUsage", "flavorsReservation"} {
		flavors, _, _ := unstructured.NestedSlice(u.Object, "status", field)
		for _, f := range flavors {
			fm, _ := f.(map[string]any)
			resources, _, _ := unstructured.NestedSlice(fm, "resources")
			for _, r := range resources {
				rm, _ := r.(map[string]any)
				total, err := parseQuantity(rm["total"])
				if err != nil {
					return nil, fmt.Errorf("status.%s %s/%s total: %w", field, str(fm, "name"), str(rm, "name"), err)
				}
				borrowed, err := parseQuantity(rm["borrowed"])
				if err != nil {
					return nil, fmt.Errorf("status.%s %s/%s borrowed: %w", field, str(fm, "name"), str(rm, "name"), err)
				}
				key := str(fm, "name") + "/" + str(rm, "name")
				if used[key] == nil {
					used[key] = &use{}
				}
				if total.Cmp(used[key].total) > 0 {
					used[key].total = total
				}
				if borrowed.Cmp(used[key].borrowed) > 0 {
					used[key].borrowed = borrowed
				}
			}
		}
	}
	groups, _, _ := unstructured.NestedSlice(u.Object, "spec", "resourceGroups")
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		var group ResourceGroup
		group.Covered, _, _ = unstructured.NestedStringSlice(gm, "coveredResources")
		flavors, _, _ := unstructured.NestedSlice(gm, "flavors")
		for _, f := range flavors {
			fm, _ := f.(map[string]any)
			flavor := FlavorQuota{Name: str(fm, "name")}
			resources, _, _ := unstructured.NestedSlice(fm, "resources")
			for _, r := range resources {
				rm, _ := r.(map[string]any)
				q := Quota{Name: str(rm, "name")}
				var err error
				if q.Nominal, err = parseQuantity(rm["nominalQuota"]); err != nil {
					return nil, fmt.Errorf("flavor %s, %s nominalQuota: %w", flavor.Name, q.Name, err)
				}
				if v, ok := rm["borrowingLimit"]; ok && v != nil {
					limit, err := parseQuantity(v)
					if err != nil {
						return nil, fmt.Errorf("flavor %s, %s borrowingLimit: %w", flavor.Name, q.Name, err)
					}
					q.BorrowingLimit = &limit
				}
				if u := used[flavor.Name+"/"+q.Name]; u != nil {
					q.InUse, q.Borrowed = u.total, u.borrowed
				}
				flavor.Resources = append(flavor.Resources, q)
			}
			group.Flavors = append(group.Flavors, flavor)
		}
		cq.Groups = append(cq.Groups, group)
	}
	return cq, nil
}
