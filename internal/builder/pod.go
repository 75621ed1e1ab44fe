package builder

import (
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/minor"
)

// PodWrapper builds a Pod, with one container unless Containers replaces it.
type PodWrapper struct{ v1.Pod }

// Container returns a container that requests (and is limited to) the
// given quantities, such as {"example.com/gpu": "2"}.
func Container(name string, requests map[v1.ResourceName]string) v1.Container {
	list := v1.ResourceList{}
	for resourceName, quantity := range requests {
		list[resourceName] = resource.MustParse(quantity)
	}
	return v1.Container{Name: name, Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Requests: list, Limits: list}}
}

// Sidecar turns a container into a sidecar: an init container that keeps
// running (restartPolicy Always).
func Sidecar(c v1.Container) v1.Container {
	c.RestartPolicy = ptr.To(v1.ContainerRestartPolicyAlways)
	return c
}

// MakePod starts a pod of the given name in namespace "default" with one
// container and no scheduler name (the default scheduler).
func MakePod(name string) *PodWrapper {
	return &PodWrapper{v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			Containers: []v1.Container{{Name: "ctr", Image: "registry.k8s.io/pause:3.10"}},
		},
	}}
}

func (w *PodWrapper) Obj() *v1.Pod { return &w.Pod }

func (w *PodWrapper) SchedulerName(name string) *PodWrapper {
	w.Spec.SchedulerName = name
	return w
}

// Priority sets the pod's PriorityClass; the API server's Priority
// admission resolves it to spec.priority.
func (w *PodWrapper) Priority(className string) *PodWrapper {
	w.Spec.PriorityClassName = className
	return w
}

func (w *PodWrapper) Label(key, value string) *PodWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[key] = value
	return w
}

// Finalizer adds a finalizer: deleting the pod then leaves it
// terminating until the finalizer is removed, as a pod whose kubelet is
// gone or whose controller holds it.
func (w *PodWrapper) Finalizer(name string) *PodWrapper {
	w.Finalizers = append(w.Finalizers, name)
	return w
}

// Containers replaces the pod's containers.
func (w *PodWrapper) Containers(containers ...v1.Container) *PodWrapper {
	w.Spec.Containers = containers
	return w
}

// InitContainers appends init containers, sidecars among them, in order.
func (w *PodWrapper) InitContainers(containers ...v1.Container) *PodWrapper {
	w.Spec.InitContainers = append(w.Spec.InitContainers, containers...)
	return w
}

// SchedulingGate adds a scheduling gate: the scheduler leaves the pod
// alone until it is removed.
func (w *PodWrapper) SchedulingGate(name string) *PodWrapper {
	w.Spec.SchedulingGates = append(w.Spec.SchedulingGates, v1.PodSchedulingGate{Name: name})
	return w
}

// PodGroup makes the pod one of the PodGroup's (spec.schedulingGroup), for
// gang scheduling.
func (w *PodWrapper) PodGroup(name string) *PodWrapper {
	minor.SetPodGroupName(&w.Pod, name)
	return w
}

// NodeSelector adds a node label the pod requires.
func (w *PodWrapper) NodeSelector(key, value string) *PodWrapper {
	if w.Spec.NodeSelector == nil {
		w.Spec.NodeSelector = map[string]string{}
	}
	w.Spec.NodeSelector[key] = value
	return w
}

// Claim adds a pod resource claim that references an existing
// ResourceClaim, used by the first container.
func (w *PodWrapper) Claim(name, claimName string) *PodWrapper {
	return w.podClaim(v1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claimName)})
}

// ClaimFromTemplate adds a pod resource claim generated from a
// ResourceClaimTemplate, used by the first container.
func (w *PodWrapper) ClaimFromTemplate(name, templateName string) *PodWrapper {
	return w.podClaim(v1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(templateName)})
}

func (w *PodWrapper) podClaim(claim v1.PodResourceClaim) *PodWrapper {
	w.Spec.ResourceClaims = append(w.Spec.ResourceClaims, claim)
	ctr := &w.Spec.Containers[0]
	ctr.Resources.Claims = append(ctr.Resources.Claims, v1.ResourceClaim{Name: claim.Name})
	return w
}

// TemplateWrapper builds a ResourceClaimTemplate.
type TemplateWrapper struct {
	resourceapi.ResourceClaimTemplate
}

// MakeTemplate starts a template in namespace "default" whose claims get the
// spec of the given claim.
func MakeTemplate(name string, claim *ClaimWrapper) *TemplateWrapper {
	return &TemplateWrapper{resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: *claim.Spec.DeepCopy()},
	}}
}

func (w *TemplateWrapper) Obj() *resourceapi.ResourceClaimTemplate { return &w.ResourceClaimTemplate }

// AdminAccess makes the last request ask for admin access.
func (w *ClaimWrapper) AdminAccess() *ClaimWrapper {
	w.Exact().AdminAccess = ptr.To(true)
	return w
}
