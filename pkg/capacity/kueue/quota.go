package kueue

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

// Mapping is Kueue's Configuration resources.deviceClassMappings by
// DeviceClass: the quota resource that counts the class's devices. The
// Configuration is the file of Kueue's manager, not an API object, so the
// tools take it from a flag.
type Mapping map[string]string

// DefaultMapping is hack/kueue/values.yaml's, in ParseMapping's form.
var DefaultMapping = []string{"drasched.dev/gpu=gpu.drasched.dev", "drasched.dev/mig=mig.gpu.drasched.dev"}

// ParseMapping reads mappings written RESOURCE=CLASS[,CLASS...], with
// the rules of Kueue's validation of its Configuration: a resource name is
// a qualified name and is mapped once, a class maps to one resource.
func ParseMapping(values []string) (Mapping, error) {
	m := Mapping{}
	resources := sets.New[string]()
	for _, value := range values {
		name, classes, ok := strings.Cut(value, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.TrimSpace(classes) == "" {
			return nil, fmt.Errorf("%q: want RESOURCE=CLASS[,CLASS...], such as %s", value, DefaultMapping[0])
		}
		if errs := validation.IsQualifiedName(name); len(errs) > 0 {
			return nil, fmt.Errorf("%q: resource name %q: %s", value, name, strings.Join(errs, "; "))
		}
		if resources.Has(name) {
			return nil, fmt.Errorf("%q: resource %s is mapped twice", value, name)
		}
		resources.Insert(name)
		for class := range strings.SplitSeq(classes, ",") {
			class = strings.TrimSpace(class)
			if class == "" {
				return nil, fmt.Errorf("%q: an empty DeviceClass name", value)
			}
			if errs := validation.IsDNS1123Subdomain(class); len(errs) > 0 {
				return nil, fmt.Errorf("%q: DeviceClass %q: %s", value, class, strings.Join(errs, "; "))
			}
			if prev, ok := m[class]; ok {
				return nil, fmt.Errorf("%q: DeviceClass %s is mapped to %s already", value, class, prev)
			}
			m[class] = name
		}
	}
	return m, nil
}

// Usage is what one unit of pods (a pod, or a gang's pods) takes of
// Kueue's quota.
type Usage struct {
	// Devices are the devices per quota resource.
	Devices map[string]int64
	// NotAdmitted says why Kueue admits no workload of such pods; empty
	// where it counts them.
	NotAdmitted string
	// Requests are the other resources the pods request (cpu, memory):
	// Kueue counts them against quota too, Fit does not.
	Requests []string
}

// Usage counts the pods' devices as Kueue v0.17 does (countDevicesPerClass
// in its pkg/dra/claims.go): for each claim of a pod from a
// ResourceClaimTemplate, the count of each request (exactly, with
// allocationMode ExactCount) under the quota resource of its DeviceClass.
// Claims by name are not counted, as Kueue does not count them. A template
// with constraints, config, firstAvailable, CEL selectors, adminAccess or
// allocationMode All, or a request for a class without mapping, keeps
// Kueue from admitting the workload at all: NotAdmitted says which.
// template returns the ResourceClaimTemplate of a namespace by name, nil
// if there is none.
func (m Mapping) Usage(pods []*v1.Pod, template func(namespace, name string) *resourceapi.ResourceClaimTemplate) Usage {
	u := Usage{Devices: map[string]int64{}}
	requests := sets.New[string]()
	for _, pod := range pods {
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			if !q.IsZero() {
				requests.Insert(string(name))
			}
		}
		for _, entry := range pod.Spec.ResourceClaims {
			if entry.ResourceClaimTemplateName == nil {
				continue
			}
			name := *entry.ResourceClaimTemplateName
			t := template(pod.Namespace, name)
			if t == nil {
				u.NotAdmitted = fmt.Sprintf("ResourceClaimTemplate %s/%s does not exist", pod.Namespace, name)
				return u
			}
			if why := m.count(&t.Spec.Spec, u.Devices); why != "" {
				u.NotAdmitted = fmt.Sprintf("ResourceClaimTemplate %s: %s", name, why)
				return u
			}
		}
	}
	u.Requests = sets.List(requests)
	return u
}

// count adds a claim's devices to devices by quota resource, or says why
// Kueue does not count them, in Kueue's words.
func (m Mapping) count(spec *resourceapi.ResourceClaimSpec, devices map[string]int64) string {
	switch {
	case len(spec.Devices.Constraints) > 0:
		return "device constraints (MatchAttribute) are not supported"
	case len(spec.Devices.Config) > 0:
		return "device config is not supported"
	}
	for _, r := range spec.Devices.Requests {
		switch {
		case r.Exactly == nil:
			return fmt.Sprintf("request %s: FirstAvailable device selection is not supported", r.Name)
		case len(r.Exactly.Selectors) > 0:
			return fmt.Sprintf("request %s: CEL selectors are not supported", r.Name)
		case ptr.Deref(r.Exactly.AdminAccess, false):
			return fmt.Sprintf("request %s: AdminAccess is not supported", r.Name)
		case r.Exactly.AllocationMode != resourceapi.DeviceAllocationModeExactCount:
			return fmt.Sprintf("request %s: allocation mode %s is not supported", r.Name, r.Exactly.AllocationMode)
		}
		resource, ok := m[r.Exactly.DeviceClassName]
		if !ok {
			return fmt.Sprintf("DeviceClass %s is not mapped in Kueue's deviceClassMappings", r.Exactly.DeviceClassName)
		}
		devices[resource] += r.Exactly.Count
	}
	return ""
}

// QuotaFit is how many more units of pods fit in a ClusterQueue's quota.
type QuotaFit struct {
	ClusterQueue string `json:"clusterQueue"`
	Cohort       string `json:"cohort,omitempty"`
	// NotAdmitted says why Kueue admits no workload of these pods; Fits is
	// 0 then.
	NotAdmitted string `json:"notAdmitted,omitempty"`
	// Resources are the quota of each resource a unit takes, in the flavor
	// of its resource group where the most units fit: a pod set takes all
	// of a group's resources from one flavor.
	Resources []ResourceFit `json:"resources,omitempty"`
	// Fits is how many more units fit in the nominal quota: per resource
	// the free quota (nominal minus in use, at least 0) divided by what a
	// unit takes, the fewest of the resources. Nil where the units take
	// none of the queue's quota resources: the queue does not bound them.
	Fits *int `json:"fits,omitempty"`
	// FitsBorrowing is how many fit with all that the borrowing limits
	// allow (nominal plus borrowingLimit minus in use), if the cohort's
	// other queues leave that much unused. Nil without a cohort (no
	// borrowing) or where BorrowingUnlimited.
	FitsBorrowing *int `json:"fitsBorrowing,omitempty"`
	// BorrowingUnlimited: the queue is in a cohort and a resource has no
	// borrowingLimit: it may borrow whatever the cohort's other queues
	// leave unused, which is not read here.
	BorrowingUnlimited bool `json:"borrowingUnlimited,omitempty"`
	// Notes say what Fits does not count.
	Notes []string `json:"notes,omitempty"`
}

// ResourceFit is the quota of one resource in one flavor, in whole
// devices.
type ResourceFit struct {
	Name   string `json:"name"`
	Flavor string `json:"flavor"`
	// PerUnit is what one unit takes.
	PerUnit        int64  `json:"perUnit"`
	Nominal        int64  `json:"nominal"`
	InUse          int64  `json:"inUse"`
	Borrowed       int64  `json:"borrowed"`
	BorrowingLimit *int64 `json:"borrowingLimit,omitempty"`
	// Free is Nominal minus InUse, at least 0.
	Free int64 `json:"free"`
}

// Fit says how many more units that take u fit in the queue's quota, with
// the queue's status as read: nominal quota minus what is in use. It does
// not see the cohort beyond the queue's own borrowing limits (the quota
// that other queues leave unused, lending limits, a Cohort's own quota),
// fair sharing, or preemption that would make room.
func (cq *ClusterQueue) Fit(u Usage) *QuotaFit {
	q := &QuotaFit{ClusterQueue: cq.Name, Cohort: cq.Cohort}
	var covered []string
	for _, r := range u.Requests {
		if cq.covers(r) {
			covered = append(covered, r)
		}
	}
	if len(covered) > 0 {
		q.Notes = append(q.Notes, fmt.Sprintf("the pods' requests for %s count against the queue's quota too: not counted here", strings.Join(covered, ", ")))
	}
	if u.NotAdmitted != "" {
		q.NotAdmitted, q.Fits = u.NotAdmitted, ptr.To(0)
		return q
	}
	var names []string
	for name, n := range u.Devices {
		if n > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return q
	}
	sort.Strings(names)
	for _, name := range names {
		if !cq.covers(name) {
			q.NotAdmitted, q.Fits = fmt.Sprintf("ClusterQueue %s has no quota for %s", cq.Name, name), ptr.To(0)
			return q
		}
	}
	fits := math.MaxInt
	for _, g := range cq.Groups {
		var need []string
		for _, name := range names {
			if slices.Contains(g.Covered, name) {
				need = append(need, name)
			}
		}
		if len(need) == 0 {
			continue
		}
		var best []ResourceFit
		bestFits := 0
		for _, f := range g.Flavors {
			rows, n := f.fit(need, u.Devices)
			if best == nil || n > bestFits {
				best, bestFits = rows, n
			}
		}
		q.Resources = append(q.Resources, best...)
		fits = min(fits, bestFits)
	}
	q.Fits = &fits
	if cq.Cohort == "" {
		return q
	}
	borrowing := math.MaxInt
	for _, r := range q.Resources {
		if r.BorrowingLimit == nil {
			q.BorrowingUnlimited = true
			continue
		}
		borrowing = min(borrowing, int(max(0, r.Nominal+*r.BorrowingLimit-r.InUse)/r.PerUnit))
	}
	if !q.BorrowingUnlimited {
		q.FitsBorrowing = &borrowing
	}
	return q
}

// covers: a resource group of the queue covers the resource.
func (cq *ClusterQueue) covers(name string) bool {
	return slices.ContainsFunc(cq.Groups, func(g ResourceGroup) bool { return slices.Contains(g.Covered, name) })
}

// fit is the flavor's quota of the resources and how many units fit in
// it; a resource the flavor lists no quota for has none.
func (f FlavorQuota) fit(names []string, perUnit map[string]int64) ([]ResourceFit, int) {
	var rows []ResourceFit
	fits := math.MaxInt
	for _, name := range names {
		row := ResourceFit{Name: name, Flavor: f.Name, PerUnit: perUnit[name]}
		if i := slices.IndexFunc(f.Resources, func(q Quota) bool { return q.Name == name }); i >= 0 {
			q := f.Resources[i]
			row.Nominal, row.InUse, row.Borrowed = q.Nominal.Value(), q.InUse.Value(), q.Borrowed.Value()
			if q.BorrowingLimit != nil {
				row.BorrowingLimit = ptr.To(q.BorrowingLimit.Value())
			}
		}
		row.Free = max(0, row.Nominal-row.InUse)
		rows = append(rows, row)
		fits = min(fits, int(row.Free/row.PerUnit))
	}
	return rows, fits
}
