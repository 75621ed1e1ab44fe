package framework

import (
	"context"
	"fmt"
	"maps"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
)

// maxPodsPerNode is what each fake node offers; never the limit in a test.
const maxPodsPerNode = 1000

// CreateNodes creates n ready nodes named Name("node-<i>"); see CreateNode.
func (env *Env) CreateNodes(n int) []*v1.Node {
	env.t.Helper()
	nodes := make([]*v1.Node, n)
	for i := range nodes {
		nodes[i] = env.CreateNode(fmt.Sprintf("node-%d", i))
	}
	return nodes
}

// CreateNode creates a ready node named Name(name), labelled with its
// kubernetes.io/hostname. It is a plain Node object: no kubelet runs, so
// bound pods never start, which the scheduler does not need.
func (env *Env) CreateNode(name string) *v1.Node {
	env.t.Helper()
	return env.CreateNodeWithResources(name, nil)
}

// CreateNodeWithResources is CreateNode for a node that offers more
// resources than CPU, memory and pods, such as extended resources of a
// device plugin.
func (env *Env) CreateNodeWithResources(name string, extra v1.ResourceList) *v1.Node {
	env.t.Helper()
	name = env.Name(name)
	node, err := env.Client.CoreV1().Nodes().Create(env.Ctx, builder.MakeNode(name, v1.LabelHostname, name), metav1.CreateOptions{})
	if err != nil {
		env.t.Fatalf("create node %s: %v", name, err)
	}
	env.cleanup(func(ctx context.Context) error {
		return env.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	node.Status = v1.NodeStatus{
		Capacity: v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("64"),
			v1.ResourceMemory: resource.MustParse("256Gi"),
			v1.ResourcePods:   *resource.NewQuantity(maxPodsPerNode, resource.DecimalSI),
		},
		Phase:      v1.NodeRunning,
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
	}
	maps.Copy(node.Status.Capacity, extra)
	node.Status.Allocatable = node.Status.Capacity
	if node, err = env.Client.CoreV1().Nodes().UpdateStatus(env.Ctx, node, metav1.UpdateOptions{}); err != nil {
		env.t.Fatalf("make node %s ready: %v", name, err)
	}
	return node
}

// MakeSlice starts a ResourceSlice of the test's driver named Name(name),
// in a pool of the same name with one slice at generation 1.
func (env *Env) MakeSlice(name string) *builder.SliceWrapper {
	return builder.MakeSlice(env.Name(name)).Driver(env.Driver)
}

// NodeSlice starts a ResourceSlice of the test's driver with devices local
// to the node; the slice and its pool are named after the node.
func (env *Env) NodeSlice(node *v1.Node, devices ...*builder.DeviceWrapper) *builder.SliceWrapper {
	return builder.MakeSlice(node.Name).Driver(env.Driver).Node(node.Name).Devices(devices...)
}

// PublishSlices creates ResourceSlices as a driver would.
func (env *Env) PublishSlices(slices ...*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	env.t.Helper()
	created := make([]*resourceapi.ResourceSlice, len(slices))
	for i, slice := range slices {
		slice = forCreate(slice)
		var err error
		if created[i], err = env.Client.ResourceV1().ResourceSlices().Create(env.Ctx, slice, metav1.CreateOptions{}); err != nil {
			env.t.Fatalf("create ResourceSlice %s: %v", slice.Name, err)
		}
		env.cleanup(func(ctx context.Context) error {
			return env.Client.ResourceV1().ResourceSlices().Delete(ctx, slice.Name, metav1.DeleteOptions{})
		})
	}
	return created
}

// CreateClass creates a DeviceClass named Name(name) that selects the
// devices of the test's driver which pass all selectors, and returns its
// name.
func (env *Env) CreateClass(name string, selectors ...string) string {
	env.t.Helper()
	selectors = append([]string{fmt.Sprintf("device.driver == %q", env.Driver)}, selectors...)
	return env.CreateDeviceClass(builder.MakeClass(env.Name(name), selectors...)).Name
}

// CreateDeviceClass creates a DeviceClass as it is.
func (env *Env) CreateDeviceClass(class *resourceapi.DeviceClass) *resourceapi.DeviceClass {
	env.t.Helper()
	class, err := env.Client.ResourceV1().DeviceClasses().Create(env.Ctx, forCreate(class), metav1.CreateOptions{})
	if err != nil {
		env.t.Fatalf("create DeviceClass: %v", err)
	}
	env.cleanup(func(ctx context.Context) error {
		return env.Client.ResourceV1().DeviceClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
	})
	return class
}

// CreateTaintRule creates a DeviceTaintRule named Name(name) that taints
// all devices of the test's driver.
func (env *Env) CreateTaintRule(name string, taint resourceapi.DeviceTaint) *minor.DeviceTaintRule {
	env.t.Helper()
	rule := minor.NewDeviceTaintRule(env.Name(name), ptr.To(env.Driver), nil, nil, taint)
	rule, err := minor.DeviceTaintRules(env.Client).Create(env.Ctx, rule, metav1.CreateOptions{})
	if err != nil {
		env.t.Fatalf("create DeviceTaintRule: %v", err)
	}
	env.cleanup(func(ctx context.Context) error {
		return minor.DeviceTaintRules(env.Client).Delete(ctx, rule.Name, metav1.DeleteOptions{})
	})
	return rule
}

// CreateClaim creates a ResourceClaim in the test's namespace.
func (env *Env) CreateClaim(claim *builder.ClaimWrapper) *resourceapi.ResourceClaim {
	env.t.Helper()
	obj := forCreate(claim.Obj())
	obj.Namespace = env.Namespace
	created, err := env.Client.ResourceV1().ResourceClaims(env.Namespace).Create(env.Ctx, obj, metav1.CreateOptions{})
	if err != nil {
		env.t.Fatalf("create ResourceClaim %s: %v", obj.Name, err)
	}
	return created
}

// CreateTemplate creates a ResourceClaimTemplate in the test's namespace.
func (env *Env) CreateTemplate(template *builder.TemplateWrapper) *resourceapi.ResourceClaimTemplate {
	env.t.Helper()
	obj := forCreate(template.Obj())
	obj.Namespace = env.Namespace
	created, err := env.Client.ResourceV1().ResourceClaimTemplates(env.Namespace).Create(env.Ctx, obj, metav1.CreateOptions{})
	if err != nil {
		env.t.Fatalf("create ResourceClaimTemplate %s: %v", obj.Name, err)
	}
	return created
}

// MakePod starts a pod for the drasched scheduler. Its grace period is 0:
// no kubelet runs that would finish a graceful deletion, such as the one by
// which preemption evicts a pod.
func (env *Env) MakePod(name string) *builder.PodWrapper {
	pod := builder.MakePod(name).SchedulerName(SchedulerName)
	pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return pod
}

// CreatePriorityClass creates a PriorityClass named env.Name(name), removed
// when the test ends, and returns its name. A policy, if given, is the
// class's preemptionPolicy (the API server's Priority admission copies it
// into pods; a pod may not set it itself).
func (env *Env) CreatePriorityClass(name string, value int32, policy ...v1.PreemptionPolicy) string {
	env.t.Helper()
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: env.Name(name)}, Value: value}
	if len(policy) > 0 {
		class.PreemptionPolicy = &policy[0]
	}
	if _, err := env.Client.SchedulingV1().PriorityClasses().Create(env.Ctx, class, metav1.CreateOptions{}); err != nil {
		env.t.Fatalf("create PriorityClass %s: %v", class.Name, err)
	}
	env.cleanup(func(ctx context.Context) error {
		return env.Client.SchedulingV1().PriorityClasses().Delete(ctx, class.Name, metav1.DeleteOptions{})
	})
	// The Priority admission plugin looks classes up in an informer: wait
	// until it admits a pod of the class (a dry run) before a test creates
	// one.
	probe := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "priority-class-probe"},
		Spec:       v1.PodSpec{PriorityClassName: class.Name, Containers: []v1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	env.WaitFor(Timeout, "PriorityClass "+class.Name+" known to admission", func(ctx context.Context) (bool, string, error) {
		_, err := env.Client.CoreV1().Pods(env.Namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil, fmt.Sprint(err), nil
	})
	return class.Name
}

// CreatePod creates a pod in the test's namespace.
func (env *Env) CreatePod(pod *builder.PodWrapper) *v1.Pod {
	env.t.Helper()
	created, err := env.createPod(pod.Obj())
	if err != nil {
		env.t.Fatalf("create pod %s: %v", pod.Name, err)
	}
	return created
}

func (env *Env) createPod(pod *v1.Pod) (*v1.Pod, error) {
	pod = forCreate(pod)
	pod.Namespace = env.Namespace
	return env.Client.CoreV1().Pods(env.Namespace).Create(env.Ctx, pod, metav1.CreateOptions{})
}

// CreatePods creates many pods at once, from parallel goroutines, the way a
// Job or a Deployment controller bursts them out.
func (env *Env) CreatePods(pods []*builder.PodWrapper) {
	env.t.Helper()
	errs := make(chan error, len(pods))
	for _, pod := range pods {
		go func() {
			_, err := env.createPod(pod.Obj())
			if err != nil {
				err = fmt.Errorf("create pod %s: %w", pod.Name, err)
			}
			errs <- err
		}()
	}
	for range pods {
		if err := <-errs; err != nil {
			env.t.Error(err)
		}
	}
	if env.t.Failed() {
		env.t.FailNow()
	}
}

// DeletePod deletes a pod at once (grace period 0): no kubelet runs that
// would finish a graceful deletion of a bound pod.
func (env *Env) DeletePod(name string) {
	env.t.Helper()
	if err := env.Client.CoreV1().Pods(env.Namespace).Delete(env.Ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		env.t.Fatalf("delete pod %s: %v", name, err)
	}
}

// LabelNamespace sets a label on the test's namespace.
func (env *Env) LabelNamespace(key, value string) {
	env.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value)
	if _, err := env.Client.CoreV1().Namespaces().Patch(env.Ctx, env.Namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		env.t.Fatalf("label namespace: %v", err)
	}
}

// cleanup deletes a cluster-scoped object when the test ends; one that is
// already gone is fine.
func (env *Env) cleanup(del func(ctx context.Context) error) {
	env.t.Cleanup(func() {
		if err := del(context.WithoutCancel(env.Ctx)); err != nil && !apierrors.IsNotFound(err) {
			env.t.Errorf("cleanup: %v", err)
		}
	})
}

// forCreate returns a copy of obj without the UID and resourceVersion that
// the builders set for unit tests; the apiserver assigns both.
func forCreate[T interface {
	metav1.Object
	DeepCopyObject() runtime.Object
}](obj T) T {
	obj = obj.DeepCopyObject().(T)
	obj.SetUID("")
	obj.SetResourceVersion("")
	return obj
}
