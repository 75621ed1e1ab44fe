package fit

import (
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	appsv1defaults "k8s.io/kubernetes/pkg/apis/apps/v1"
	batchv1defaults "k8s.io/kubernetes/pkg/apis/batch/v1"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
	resourcev1defaults "k8s.io/kubernetes/pkg/apis/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/manifest"
	"github.com/drasched/drasched/internal/minor"
)

// Workload is what fit places: units of one or more pods.
type Workload struct {
	// Name says where the pods come from, such as "Deployment
	// default/train" or "Pod default/one-gpu".
	Name string
	// Pods are the pods of one unit: one pod, or the pods of a gang that
	// are placed together or not at all.
	Pods []*v1.Pod
	// Group is the PodGroup of a gang, nil for single pods. Its
	// resourceClaims are made once per unit and shared by the unit's pods
	// whose claim matches.
	Group *minor.PodGroup
	// Templates are the ResourceClaimTemplates of the file, by name;
	// others are read from the cluster.
	Templates map[string]*resourceapi.ResourceClaimTemplate
	// Replicas is how many units the file asks for (a Deployment's
	// replicas, a Job's parallelism); 0 if it does not say.
	Replicas int
}

// ErrNoClaims marks a workload whose pods have no ResourceClaims: nothing
// for fit to place.
var ErrNoClaims = errors.New("has no resourceClaims: fit answers for pods with DRA devices")

// Load reads a workload from a manifest: a Pod, a PodTemplate, a
// Deployment, ReplicaSet, StatefulSet or Job (its pod template), a PodGroup
// with its pods or a workload whose pod template names it (a gang), or a
// ResourceClaimTemplate alone (a pod with one claim from it). Other
// ResourceClaimTemplates of the manifest are used by the pods' claims.
// Objects without a namespace get namespace.
func Load(data []byte, namespace string) (*Workload, error) {
	objects, err := manifest.Decode(data)
	if err != nil {
		return nil, err
	}
	for _, obj := range objects {
		// What the API server would store: count 1 for a request without
		// one, and so on.
		defaulter.Default(obj)
	}
	if len(objects) == 0 {
		return nil, errors.New("no objects")
	}
	w := &Workload{Templates: map[string]*resourceapi.ResourceClaimTemplate{}}
	var templates []*resourceapi.ResourceClaimTemplate
	var groups []*minor.PodGroup
	var sources []source
	fromTemplate := func(kind string, meta metav1.ObjectMeta, t v1.PodTemplateSpec, replicas *int32) source {
		pod := &v1.Pod{ObjectMeta: t.ObjectMeta, Spec: t.Spec}
		if pod.Name == "" {
			pod.Name = meta.Name
		}
		if pod.Namespace == "" {
			pod.Namespace = meta.Namespace
		}
		return source{name: fmt.Sprintf("%s %s", kind, objectName(meta, namespace)), pod: pod, replicas: int(ptr.Deref(replicas, 0))}
	}
	for _, obj := range objects {
		switch o := obj.(type) {
		case *v1.Pod:
			sources = append(sources, source{name: "Pod " + objectName(o.ObjectMeta, namespace), pod: o})
		case *v1.PodTemplate:
			sources = append(sources, fromTemplate("PodTemplate", o.ObjectMeta, o.Template, nil))
		case *appsv1.Deployment:
			sources = append(sources, fromTemplate("Deployment", o.ObjectMeta, o.Spec.Template, ptr.To(ptr.Deref(o.Spec.Replicas, 1))))
		case *appsv1.ReplicaSet:
			sources = append(sources, fromTemplate("ReplicaSet", o.ObjectMeta, o.Spec.Template, ptr.To(ptr.Deref(o.Spec.Replicas, 1))))
		case *appsv1.StatefulSet:
			sources = append(sources, fromTemplate("StatefulSet", o.ObjectMeta, o.Spec.Template, ptr.To(ptr.Deref(o.Spec.Replicas, 1))))
		case *batchv1.Job:
			sources = append(sources, fromTemplate("Job", o.ObjectMeta, o.Spec.Template, ptr.To(ptr.Deref(o.Spec.Parallelism, 1))))
		case *resourceapi.ResourceClaimTemplate:
			templates = append(templates, o)
		case *minor.PodGroup:
			groups = append(groups, o)
		case *resourceapi.ResourceClaim:
			// A claim the pods share by name: it must exist in the
			// cluster, as the pods would need it there.
			return nil, fmt.Errorf("ResourceClaim %s: fit reads claims that pods share by name from the cluster; give the pods (or a ResourceClaimTemplate)", o.Name)
		default:
			gvk := obj.GetObjectKind().GroupVersionKind()
			return nil, fmt.Errorf("%s %s: fit places pods; give a Pod, a PodTemplate, a Deployment, ReplicaSet, StatefulSet or Job, a PodGroup with its pods, or a ResourceClaimTemplate", gvk.Kind, objectName(metaOf(obj), namespace))
		}
	}
	for _, t := range templates {
		if t.Namespace == "" {
			t.Namespace = namespace
		}
		w.Templates[t.Name] = t
	}
	for _, s := range sources {
		if s.pod.Namespace == "" {
			s.pod.Namespace = namespace
		}
	}

	switch {
	case len(groups) > 1:
		return nil, fmt.Errorf("%d PodGroups: fit places one gang at a time", len(groups))
	case len(groups) == 1:
		return gang(w, groups[0], namespace, sources)
	case len(sources) > 1:
		return nil, fmt.Errorf("%d workloads (%s, %s, ...): fit places one kind of pod at a time (several pods together are a gang: add their PodGroup)", len(sources), sources[0].name, sources[1].name)
	case len(sources) == 1:
		w.Name, w.Pods, w.Replicas = sources[0].name, []*v1.Pod{sources[0].pod}, sources[0].replicas
	case len(templates) == 1:
		t := templates[0]
		w.Name = "ResourceClaimTemplate " + objectName(t.ObjectMeta, namespace)
		w.Pods = []*v1.Pod{{
			ObjectMeta: metav1.ObjectMeta{Name: t.Name, Namespace: t.Namespace},
			Spec: v1.PodSpec{
				ResourceClaims: []v1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: ptr.To(t.Name)}},
				Containers:     []v1.Container{{Name: "ctr", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "devices"}}}}},
			},
		}}
	case len(templates) > 1:
		return nil, fmt.Errorf("%d ResourceClaimTemplates and no pod: give the pod that uses them", len(templates))
	}
	for _, pod := range w.Pods {
		if len(pod.Spec.ResourceClaims) == 0 {
			return nil, fmt.Errorf("%s: %w", w.Name, ErrNoClaims)
		}
	}
	return w, nil
}

// gang makes the unit of a PodGroup: the manifest's pods of the group, or
// minCount pods of a workload whose pod template names it.
func gang(w *Workload, group *minor.PodGroup, namespace string, sources []source) (*Workload, error) {
	if group.Namespace == "" {
		group.Namespace = namespace
	}
	w.Group = group
	w.Name = "PodGroup " + objectName(group.ObjectMeta, namespace)
	minCount := 1
	if g := group.Spec.SchedulingPolicy.Gang; g != nil {
		minCount = int(g.MinCount)
	}
	var members []*v1.Pod
	for _, s := range sources {
		if ptr.Deref(minor.PodGroupName(s.pod), "") != group.Name {
			return nil, fmt.Errorf("%s is not in PodGroup %s (spec.schedulingGroup.podGroupName)", s.name, group.Name)
		}
		members = append(members, s.pod)
	}
	switch {
	case len(members) == 0:
		return nil, fmt.Errorf("PodGroup %s: no pods of it in the manifest", group.Name)
	case len(members) == 1 && minCount > 1:
		// A template: minCount pods of it make the gang.
		for i := 1; i < minCount; i++ {
			pod := members[0].DeepCopy()
			pod.Name = fmt.Sprintf("%s-%d", members[0].Name, i)
			members = append(members, pod)
		}
		members[0] = members[0].DeepCopy()
		members[0].Name += "-0"
	}
	if len(members) < minCount {
		return nil, fmt.Errorf("PodGroup %s: %d pods in the manifest, fewer than its minCount %d", group.Name, len(members), minCount)
	}
	w.Pods = members
	if !slices.ContainsFunc(members, func(p *v1.Pod) bool { return len(p.Spec.ResourceClaims) > 0 }) {
		return nil, fmt.Errorf("%s: %w", w.Name, ErrNoClaims)
	}
	return w, nil
}

// defaulter applies the API server's defaults to the kinds Load reads.
var defaulter = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, register := range []func(*runtime.Scheme) error{
		corev1defaults.RegisterDefaults, appsv1defaults.RegisterDefaults, batchv1defaults.RegisterDefaults,
		resourcev1defaults.RegisterDefaults, minor.RegisterPodGroupDefaults,
	} {
		utilruntime.Must(register(s))
	}
	return s
}()

// source is a pod of the manifest and where it comes from.
type source struct {
	name     string
	pod      *v1.Pod
	replicas int
}

func objectName(meta metav1.ObjectMeta, namespace string) string {
	ns := meta.Namespace
	if ns == "" {
		ns = namespace
	}
	if ns == "" {
		return meta.Name
	}
	return ns + "/" + meta.Name
}

func metaOf(obj runtime.Object) metav1.ObjectMeta {
	if o, ok := obj.(metav1.Object); ok {
		return metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace()}
	}
	return metav1.ObjectMeta{}
}
