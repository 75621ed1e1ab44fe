package extendedresources

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor/schedminor"
	"github.com/drasched/drasched/pkg/plugins/drapreemption"
	"github.com/drasched/drasched/test/integration/framework"
)

// upstreamScheduler is kube-scheduler's default profile, with the in-tree
// DynamicResources plugin, in the same scheduler as drasched's.
const upstreamScheduler = "upstream"

// env is one test's share of the control plane (framework.Env) with a
// scheduler that runs two profiles, drasched's with a PreBind hook and
// kube-scheduler's default, and a DeviceClass of the test's driver that
// backs the test's extended resource.
type env struct {
	*framework.Env
	hook  *preBindHook
	sched *framework.Scheduler
	// class is the name of the DeviceClass that backs resource.
	class    string
	resource v1.ResourceName
}

// setup starts the scheduler for one test. No ResourceClaim controller
// runs: the claims for extended resources that PreBind creates must be
// deleted by the scheduler itself when binding fails, and the controller
// would hide a leak.
func setup(t *testing.T) *env {
	t.Helper()
	e := &env{Env: framework.SetupWith(t, framework.SetupOptions{NoClaimController: true})}
	e.hook = &preBindHook{client: e.Client, claimsSeen: map[string][]string{}, failed: map[string]bool{},
		// Not in parallel: after StructuredDRA's PreBind.
		PreFlight: schedminor.PreFlight{Run: func(_ fwk.CycleState, pod *v1.Pod) *fwk.Status {
			if pod.Labels[hookLabel] == "" {
				return fwk.NewStatus(fwk.Skip)
			}
			return nil
		}}}
	upstream := upstreamProfile(t)
	e.sched = e.StartScheduler(framework.SchedulerOptions{
		Configure: func(cfg *schedconfig.KubeSchedulerConfiguration) {
			// Retries after errors come quickly; requeueing after
			// unschedulable attempts still needs a queueing hint, since
			// unschedulable pods are flushed only every 5 minutes.
			cfg.PodInitialBackoffSeconds, cfg.PodMaxBackoffSeconds = 1, 1
			plugins := &cfg.Profiles[0].Plugins.MultiPoint
			plugins.Enabled = append(plugins.Enabled, schedconfig.Plugin{Name: hookName})
			cfg.Profiles = append(cfg.Profiles, upstream)
		},
		Registry: frameworkruntime.Registry{
			hookName: func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return e.hook, nil },
		},
	})
	e.resource = v1.ResourceName("example.com/gpu-" + e.Namespace)
	e.class = e.createClass("gpu", e.Driver, string(e.resource))
	return e
}

// upstreamProfile is kube-scheduler's default profile, named "upstream",
// with the shipped profile's queue sort, enabled as there (in multiPoint):
// kube-scheduler requires the same queueSort plugin set in every profile of
// a process. It orders pods, which places none differently.
func upstreamProfile(t *testing.T) schedconfig.KubeSchedulerProfile {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(`
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: `+upstreamScheduler+`
  plugins:
    multiPoint:
      enabled:
      - name: `+drapreemption.QueueSortName+`
      disabled:
      - name: PrioritySort`), nil, nil)
	if err != nil {
		t.Fatalf("decode the default profile: %v", err)
	}
	return obj.(*schedconfig.KubeSchedulerConfiguration).Profiles[0]
}

// createClass creates a DeviceClass named Name(name) for the devices of a
// driver, mapped to an extended resource name if one is given, and returns
// its name.
func (e *env) createClass(name, driver, extendedResourceName string) string {
	class := builder.MakeClass(e.Name(name), fmt.Sprintf("device.driver == %q", driver))
	if extendedResourceName != "" {
		class.Spec.ExtendedResourceName = ptr.To(extendedResourceName)
	}
	return e.CreateDeviceClass(class).Name
}

// publish creates the ResourceSlice of a node's pool of a driver with n
// devices named <prefix>-<i>.
func (e *env) publish(node *v1.Node, driver, prefix string, n int) *resourceapi.ResourceSlice {
	slice := builder.MakeSlice(node.Name+"-"+prefix).Driver(driver).Node(node.Name).Pool(node.Name, 1, 1).
		Devices(builder.Devices(prefix, n, nil)...)
	return e.PublishSlices(slice.Obj())[0]
}

// gpus is a container's request for n of the test's extended resource.
func (e *env) gpus(n string) map[v1.ResourceName]string {
	return map[v1.ResourceName]string{e.resource: n}
}

// claims lists the claims of the test's namespace.
func (e *env) claims(t *testing.T) []resourceapi.ResourceClaim {
	t.Helper()
	claims, err := e.Client.ResourceV1().ResourceClaims(e.Namespace).List(e.Ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claims.Items
}

// hookName is a PreBind plugin that runs after StructuredDRA's PreBind
// for pods with the hookLabel and injects failures.
const (
	hookName  = "TestPreBindHook"
	hookLabel = "drasched.test/prebind"
	// hookDeletePod deletes the pod, so that binding fails.
	hookDeletePod = "delete-pod"
	// hookFailOnce fails the first PreBind of the pod.
	hookFailOnce = "fail-once"
)

type preBindHook struct {
	schedminor.PreFlight
	client kubernetes.Interface
	mutex  sync.Mutex
	// claimsSeen are the claims in the pod's namespace when the hook
	// acted, by namespace/name of the pod.
	claimsSeen map[string][]string
	failed     map[string]bool
}

var _ fwk.PreBindPlugin = &preBindHook{}

func (h *preBindHook) Name() string { return hookName }

func (h *preBindHook) PreBind(ctx context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) *fwk.Status {
	h.mutex.Lock()
	defer h.mutex.Unlock()
	switch pod.Labels[hookLabel] {
	case hookDeletePod:
		h.recordClaims(ctx, pod)
		if err := h.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			return fwk.AsStatus(err)
		}
	case hookFailOnce:
		if key := klog.KObj(pod).String(); !h.failed[key] {
			h.failed[key] = true
			h.recordClaims(ctx, pod)
			return fwk.AsStatus(errors.New("injected PreBind failure"))
		}
	}
	return nil
}

func (h *preBindHook) recordClaims(ctx context.Context, pod *v1.Pod) {
	claims, err := h.client.ResourceV1().ResourceClaims(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	key := klog.KObj(pod).String()
	for _, claim := range claims.Items {
		h.claimsSeen[key] = append(h.claimsSeen[key], claim.Name)
	}
}

func (h *preBindHook) seen(pod *v1.Pod) []string {
	h.mutex.Lock()
	defer h.mutex.Unlock()
	return h.claimsSeen[klog.KObj(pod).String()]
}
