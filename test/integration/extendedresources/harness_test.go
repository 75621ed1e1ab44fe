package extendedresources

// A small, self-contained harness: embedded etcd, an in-process
// kube-apiserver with RBAC, and an in-process scheduler with the profile of
// config/scheduler-config.yaml, running as the scheduler's ServiceAccount,
// next to kube-scheduler's default profile. The shared harness of
// test/integration/framework does not do two of these yet (its control
// plane authorizes everything, and it runs one profile); once it does,
// these tests belong there.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	etcdtestserver "k8s.io/apiserver/pkg/storage/etcd3/testserver"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/pkg/scheduler"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/profile"

	_ "github.com/drasched/drasched/apis/config/scheme"
	"github.com/drasched/drasched/pkg/plugins/dra"
)

const (
	// ourScheduler is the profile of config/scheduler-config.yaml.
	ourScheduler = "drasched"
	// upstreamScheduler is kube-scheduler's default profile, with the
	// in-tree DynamicResources plugin, in the same scheduler.
	upstreamScheduler = "upstream"
	// schedulerUser is the scheduler's ServiceAccount of
	// config/scheduler/rbac.yaml, which the scheduler impersonates.
	schedulerUser = "system:serviceaccount:drasched-system:drasched-scheduler"
)

// env is one control plane and scheduler, shared by the subtests of a test.
type env struct {
	ctx context.Context
	// admin is a client with all permissions; the scheduler has only
	// those of its ClusterRole.
	admin kubernetes.Interface
	hook  *preBindHook
}

// setup starts etcd, kube-apiserver with RBAC, and the scheduler as the
// ServiceAccount of config/scheduler/rbac.yaml. Everything stops when the
// test ends.
func setup(t *testing.T) *env {
	t.Helper()
	// The scheduler logs a lot at ktesting's default verbosity.
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))

	etcd := etcdtestserver.RunEtcd(t, nil)
	storage := storagebackend.NewDefaultConfig(path.Join("/", string(uuid.NewUUID()), "registry"), nil)
	storage.Transport.ServerList = etcd.Endpoints()
	server, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(), []string{
		// No ServiceAccount controller creates default ServiceAccounts,
		// and no node lifecycle controller removes the not-ready taint.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		// The scheduler sets owner references on claims it creates.
		"--enable-admission-plugins=OwnerReferencesPermissionEnforcement",
		"--authorization-mode=RBAC",
	}, storage)
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(server.TearDownFn)
	admin := kubernetes.NewForConfigOrDie(server.ClientConfig)

	applyRBAC(t, ctx, admin)
	schedulerConfig := rest.CopyConfig(server.ClientConfig)
	schedulerConfig.Impersonate = rest.ImpersonationConfig{UserName: schedulerUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:drasched-system", "system:authenticated"}}
	client := kubernetes.NewForConfigOrDie(schedulerConfig)
	waitForRBAC(t, ctx, client)

	hook := &preBindHook{client: admin, claimsSeen: map[string][]string{}, failed: map[string]bool{}}
	registry := frameworkruntime.Registry{
		dra.Name: dra.New,
		hookName: func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return hook, nil },
	}
	informerFactory := scheduler.NewInformerFactory(client, 0, nil)
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	sched, err := scheduler.New(ctx, client, informerFactory, nil, profile.NewRecorderFactory(broadcaster),
		scheduler.WithProfiles(profiles(t)...),
		scheduler.WithFrameworkOutOfTreeRegistry(registry),
		// Retries after errors come quickly; requeueing after
		// unschedulable attempts still needs a queueing hint, since the
		// unschedulable pods are flushed only every 5 minutes.
		scheduler.WithPodInitialBackoffSeconds(1),
		scheduler.WithPodMaxBackoffSeconds(1),
	)
	if err != nil {
		t.Fatalf("create scheduler: %v", err)
	}
	broadcaster.StartRecordingToSink(ctx.Done())
	informerFactory.Start(ctx.Done())
	informerFactory.WaitForCacheSync(ctx.Done())
	go sched.Run(ctx)
	t.Cleanup(func() {
		cancel()
		broadcaster.Shutdown()
		informerFactory.Shutdown()
	})
	return &env{ctx: ctx, admin: admin, hook: hook}
}

// profiles are drasched's profile from config/scheduler-config.yaml, with
// the test's PreBind hook added after StructuredDRA, and kube-scheduler's
// default profile under the name "upstream".
func profiles(t *testing.T) []schedconfig.KubeSchedulerProfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ours := decodeSchedulerConfig(t, data).Profiles
	if len(ours) != 1 || ours[0].SchedulerName != ourScheduler {
		t.Fatalf("scheduler-config.yaml has profiles %v, want one named %s", ours, ourScheduler)
	}
	ours[0].Plugins.MultiPoint.Enabled = append(ours[0].Plugins.MultiPoint.Enabled, schedconfig.Plugin{Name: hookName})
	upstream := decodeSchedulerConfig(t, []byte(`
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: `+upstreamScheduler)).Profiles
	return append(ours, upstream...)
}

func decodeSchedulerConfig(t *testing.T, data []byte) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode scheduler configuration: %v", err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded a %T, want *KubeSchedulerConfiguration", obj)
	}
	return cfg
}

// applyRBAC creates the cluster-wide RBAC objects of
// config/scheduler/rbac.yaml: the scheduler gets exactly what it would get
// in a cluster.
func applyRBAC(t *testing.T, ctx context.Context, admin kubernetes.Interface) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "scheduler", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	found := 0
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode rbac.yaml: %v", err)
		}
		switch obj := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, obj, metav1.CreateOptions{})
			found++
		case *rbacv1.ClusterRoleBinding:
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, obj, metav1.CreateOptions{})
			found++
		}
		if err != nil {
			t.Fatalf("create RBAC object: %v", err)
		}
	}
	if found < 3 {
		t.Fatalf("rbac.yaml has %d cluster-wide objects, want the ClusterRole and its bindings", found)
	}
}

// waitForRBAC waits until the authorizer knows the new bindings.
func waitForRBAC(t *testing.T, ctx context.Context, client kubernetes.Interface) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("scheduler permissions: %v", err)
	}
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
	client kubernetes.Interface
	mutex  sync.Mutex
	// claimsSeen are the claims in the pod's namespace when the hook
	// acted, by namespace/name of the pod.
	claimsSeen map[string][]string
	failed     map[string]bool
}

var _ fwk.PreBindPlugin = &preBindHook{}

func (h *preBindHook) Name() string { return hookName }

func (h *preBindHook) PreBindPreFlight(_ context.Context, _ fwk.CycleState, pod *v1.Pod, _ string) (*fwk.PreBindPreFlightResult, *fwk.Status) {
	if pod.Labels[hookLabel] == "" {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	// Not in parallel: after StructuredDRA's PreBind.
	return &fwk.PreBindPreFlightResult{AllowParallel: false}, nil
}

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

// Objects.

func (e *env) namespace(t *testing.T, name string) string {
	t.Helper()
	if _, err := e.admin.CoreV1().Namespaces().Create(e.ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// node creates a node with room for pods and the given extended
// resources in its allocatable.
func (e *env) node(t *testing.T, name string, extended map[v1.ResourceName]string) {
	t.Helper()
	resources := v1.ResourceList{
		v1.ResourcePods:   resource.MustParse("110"),
		v1.ResourceCPU:    resource.MustParse("8"),
		v1.ResourceMemory: resource.MustParse("32Gi"),
	}
	for resourceName, quantity := range extended {
		resources[resourceName] = resource.MustParse(quantity)
	}
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: name}},
		// Nodes may set their status on create.
		Status: v1.NodeStatus{Capacity: resources, Allocatable: resources},
	}
	if _, err := e.admin.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// class creates a DeviceClass for the devices of a driver, mapped to an
// extended resource name if one is given.
func (e *env) class(t *testing.T, name, driver, extendedResourceName string) {
	t.Helper()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
	if extendedResourceName != "" {
		class.Spec.ExtendedResourceName = &extendedResourceName
	}
	if _, err := e.admin.ResourceV1().DeviceClasses().Create(e.ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// slice creates the ResourceSlice of a node's pool with n devices
// named <prefix>-<i>.
func (e *env) slice(t *testing.T, node, driver, prefix string, n int) *resourceapi.ResourceSlice {
	t.Helper()
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: &node,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := range n {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: fmt.Sprintf("%s-%d", prefix, i)})
	}
	slice, err := e.admin.ResourceV1().ResourceSlices().Create(e.ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slice
}

// podWrapper builds pods: MakePod(ns, name).Container("app", res).Obj().
type podWrapper struct{ v1.Pod }

func makePod(namespace, name string) *podWrapper {
	return &podWrapper{v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       v1.PodSpec{SchedulerName: ourScheduler},
	}}
}

func container(name string, resources map[v1.ResourceName]string) v1.Container {
	list := v1.ResourceList{}
	for resourceName, quantity := range resources {
		list[resourceName] = resource.MustParse(quantity)
	}
	return v1.Container{Name: name, Image: "registry.k8s.io/pause:3.10", Resources: v1.ResourceRequirements{Requests: list, Limits: list}}
}

func (p *podWrapper) Container(name string, resources map[v1.ResourceName]string) *podWrapper {
	p.Spec.Containers = append(p.Spec.Containers, container(name, resources))
	return p
}

func (p *podWrapper) Init(name string, resources map[v1.ResourceName]string) *podWrapper {
	p.Spec.InitContainers = append(p.Spec.InitContainers, container(name, resources))
	return p
}

func (p *podWrapper) Sidecar(name string, resources map[v1.ResourceName]string) *podWrapper {
	c := container(name, resources)
	always := v1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	return p
}

func (p *podWrapper) Scheduler(name string) *podWrapper {
	p.Spec.SchedulerName = name
	return p
}

func (p *podWrapper) OnNode(node string) *podWrapper {
	p.Spec.NodeSelector = map[string]string{v1.LabelHostname: node}
	return p
}

func (p *podWrapper) Label(key, value string) *podWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[key] = value
	return p
}

func (p *podWrapper) Gate(name string) *podWrapper {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, v1.PodSchedulingGate{Name: name})
	return p
}

func (p *podWrapper) Obj() *v1.Pod { return &p.Pod }

func (e *env) create(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	pod, err := e.admin.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// Waiting.

const timeout = 30 * time.Second

// eventually polls the condition until it holds or the timeout passes.
func (e *env) eventually(t *testing.T, what string, condition func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, timeout, true, condition); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// scheduled waits until the pod is bound and returns it.
func (e *env) scheduled(t *testing.T, pod *v1.Pod) *v1.Pod {
	t.Helper()
	var latest *v1.Pod
	e.eventually(t, "pod "+pod.Name+" bound", func(ctx context.Context) (bool, error) {
		var err error
		latest, err = e.admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && latest.Spec.NodeName != "", err
	})
	return latest
}

// unschedulable waits until the scheduler gave up on the pod and returns
// the message of its PodScheduled condition.
func (e *env) unschedulable(t *testing.T, pod *v1.Pod) string {
	t.Helper()
	var message string
	e.eventually(t, "pod "+pod.Name+" unschedulable", func(ctx context.Context) (bool, error) {
		latest, err := e.admin.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range latest.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				message = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	return message
}

func (e *env) claims(t *testing.T, namespace string) []resourceapi.ResourceClaim {
	t.Helper()
	claims, err := e.admin.ResourceV1().ResourceClaims(namespace).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claims.Items
}
