package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/apis/config"
	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/allocator"
	"github.com/drasched/drasched/pkg/leaderfence"
	"github.com/drasched/drasched/pkg/tracker"
	"github.com/drasched/drasched/pkg/tracker/trackertest"
)

// The table tests below walk one pod through the plugin's extension points
// as the framework calls them, with a fake clientset (the API) and a fake
// tracker (the claim cache and the allocations in flight), and check the
// statuses, the API writes, the tracker calls and the claims at the end.

const (
	gpuClass = "gpu.example.com"
	gpuPool  = "node-a"
)

var (
	nodeA = builder.MakeNode("node-a")
	nodeB = builder.MakeNode("node-b")
)

// gpuSlice publishes n GPUs gpu-0 ... on node-a, pool node-a.
func gpuSlice(n int) *resourceapi.ResourceSlice {
	return builder.MakeSlice("node-a").Node("node-a").Devices(builder.Devices("gpu", n, nil)...).Obj()
}

func gpuClaim(name string) *builder.ClaimWrapper {
	return builder.MakeClaim(name).Request("gpu", gpuClass, 1)
}

// allocated returns the claim allocated gpu-<index> on node-a, optionally
// reserved for pods.
func allocated(c *builder.ClaimWrapper, device string, podUIDs ...types.UID) *resourceapi.ResourceClaim {
	claim := c.Obj().DeepCopy()
	claim.Finalizers = []string{resourceapi.Finalizer}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpu.example.com", Pool: gpuPool, Device: device,
		}}},
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"node-a"}}},
		}}},
	}
	for _, uid := range podUIDs {
		claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: "pod-" + string(uid), UID: uid})
	}
	return claim
}

func podWithClaims(claims ...string) *v1.Pod {
	w := builder.MakePod("pod")
	for _, c := range claims {
		w.Claim(c, c)
	}
	pod := w.Obj()
	pod.UID = "pod-uid"
	return pod
}

// wantStatus is an expected status: its code and a part of its message.
type wantStatus struct {
	code    fwk.Code
	message string
}

func ok() *wantStatus { return &wantStatus{code: fwk.Success} }
func unresolvable(message string) *wantStatus {
	return &wantStatus{code: fwk.UnschedulableAndUnresolvable, message: message}
}
func failed(message string) *wantStatus { return &wantStatus{code: fwk.Error, message: message} }

func (w *wantStatus) check(t *testing.T, point string, got *fwk.Status) {
	t.Helper()
	if w == nil {
		t.Fatalf("%s: unexpected call (status %v)", point, got)
	}
	if got.Code() != w.code || !strings.Contains(got.Message(), w.message) {
		t.Errorf("%s: got %v %q, want %v containing %q", point, got.Code(), got.Message(), w.code, w.message)
	}
}

// want is what one pod's walk through the extension points must show. A
// nil status means the point must not be reached.
type want struct {
	preEnqueue *wantStatus
	preFilter  *wantStatus
	// preFilterNodes: the nodes PreFilter limits the pod to.
	preFilterNodes sets.Set[string]
	// filter: node name to status; node-a and node-b are filtered.
	filter     map[string]*wantStatus
	postFilter *wantStatus
	// score: node name to score, for nodes that passed Filter.
	score   map[string]int64
	reserve *wantStatus
	preBind *wantStatus
	// unreserve: the framework calls Unreserve after PreBind succeeded
	// (the binding failed).
	unreserve bool
	// writes are the API writes of the walk, as "verb resource[/sub]".
	writes []string
	// trackerCalls are the tracker's mutating calls.
	trackerCalls []string
	// inFlight: allocations left in flight at the end.
	inFlight int
	// claim checks a claim in the API at the end.
	claim map[string]func(*resourceapi.ResourceClaim) error
}

type testCase struct {
	pod     *v1.Pod
	objects []runtime.Object
	// inFlight are allocations in flight for other pods.
	inFlight []*resourceapi.ResourceClaim
	// prepare changes the API or the tracker before the walk.
	prepare func(env *pluginEnv)
	want    want
}

type pluginEnv struct {
	ctx     context.Context
	client  *fake.Clientset
	tracker *trackertest.Fake
	plugin  *Plugin
}

// testPlugin builds the plugin on the client and tracker as New does,
// except for the framework handle, and starts the factory's informers,
// which the test's context stops.
func testPlugin(t *testing.T, ctx context.Context, client *fake.Clientset, factory informers.SharedInformerFactory, tr tracker.Interface) *Plugin {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	pl := &Plugin{
		PreFlight:      preFlight,
		fh:             testHandle{factory: factory},
		client:         client,
		fts:            fts,
		features:       dynamicresources.AllocatorFeatures(fts),
		tracker:        tr,
		cache:          allocator.NewCache(0),
		scoring:        config.DeviceScoringMostAllocated,
		podsByClaim:    cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"claims": podClaimKeys}),
		claimIndexName: "claims",
	}
	if err := pl.setupExtendedResources(ctx, factory, nil, "test"); err != nil {
		t.Fatal(err)
	}
	// As New: kube-scheduler's metrics that the plugin observes exist
	// only once registered (in 1.36, resourceclaim_creates_total too).
	registerMetrics()
	if err := compactSlices(factory.Resource().V1().ResourceSlices().Informer()); err != nil {
		t.Fatal(err)
	}
	if err := pl.nodeLocal.start(factory.Resource().V1().ResourceSlices().Informer()); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	t.Cleanup(func() {
		cancel()
		factory.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), factory.Resource().V1().ResourceClaims().Informer().HasSynced,
		factory.Resource().V1().DeviceClasses().Informer().HasSynced, pl.nodeLocal.registration.HasSynced) {
		t.Fatal("caches did not sync")
	}
	return pl
}

// testHandle is the part of the framework handle the plugin's extension
// points use: the informers, and a nominator (no nominated pods unless a
// test sets some).
type testHandle struct {
	fwk.Handle
	factory   informers.SharedInformerFactory
	nominated map[string][]fwk.PodInfo
}

func (h testHandle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h testHandle) NominatedPodsForNode(node string) []fwk.PodInfo         { return h.nominated[node] }
func (h testHandle) ProfileName() string                                    { return "test" }

// newPluginEnv builds the plugin on a fake clientset that holds the pod and
// the claims, and a fake tracker that holds claims, slices and classes, as
// New does except for the framework handle.
func newPluginEnv(t *testing.T, pod *v1.Pod, objects ...runtime.Object) *pluginEnv {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	var apiObjects []runtime.Object
	if pod != nil {
		apiObjects = append(apiObjects, pod)
	}
	fakeTracker := trackertest.NewFake()
	for _, obj := range objects {
		fakeTracker.Add(obj)
		switch o := obj.(type) {
		case *resourceapi.ResourceClaim:
			apiObjects = append(apiObjects, o.DeepCopy())
		case *resourceapi.ResourceSlice:
			apiObjects = append(apiObjects, o.DeepCopy())
		}
	}
	client := trackertest.VersionedClientset(apiObjects...)
	factory := informers.NewSharedInformerFactory(client, 0)
	pl := testPlugin(t, ctx, client, factory, fakeTracker)
	if pod != nil {
		if err := pl.podsByClaim.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	// Only the walk's own API calls count.
	client.ClearActions()
	return &pluginEnv{ctx: ctx, client: client, tracker: fakeTracker, plugin: pl}
}

// writes lists the API writes so far.
func (env *pluginEnv) writes() []string {
	var writes []string
	for _, action := range env.client.Actions() {
		switch action.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		resource := action.GetResource().Resource
		if sub := action.GetSubresource(); sub != "" {
			resource += "/" + sub
		}
		writes = append(writes, action.GetVerb()+" "+resource)
	}
	return writes
}

// walk runs the pod through the extension points as the framework does
// and checks each status.
func (env *pluginEnv) walk(t *testing.T, pod *v1.Pod, w want) {
	t.Helper()
	pl, ctx := env.plugin, env.ctx
	w.preEnqueue.check(t, "PreEnqueue", pl.PreEnqueue(ctx, pod))
	if w.preFilter == nil {
		return
	}
	cs := framework.NewCycleState()
	result, status := pl.PreFilter(ctx, cs, pod, nil)
	w.preFilter.check(t, "PreFilter", status)
	var nodes sets.Set[string]
	if result != nil {
		nodes = result.NodeNames
	}
	if !nodes.Equal(w.preFilterNodes) {
		t.Errorf("PreFilter limits the pod to %v, want %v", sets.List(nodes), sets.List(w.preFilterNodes))
	}
	if !status.IsSuccess() && !status.IsSkip() {
		return
	}
	var passed []string
	for _, node := range []*v1.Node{nodeA, nodeB} {
		nodeInfo := framework.NewNodeInfo()
		nodeInfo.SetNode(node)
		status := pl.Filter(ctx, cs, pod, nodeInfo)
		w.filter[node.Name].check(t, "Filter "+node.Name, status)
		if status.IsSuccess() {
			passed = append(passed, node.Name)
		}
	}
	if len(passed) == 0 {
		_, status := pl.PostFilter(ctx, cs, pod, nil)
		w.postFilter.check(t, "PostFilter", status)
		return
	}
	for _, name := range passed {
		nodeInfo := framework.NewNodeInfo()
		nodeInfo.SetNode(map[string]*v1.Node{"node-a": nodeA, "node-b": nodeB}[name])
		score, status := pl.Score(ctx, cs, pod, nodeInfo)
		if !status.IsSuccess() {
			t.Errorf("Score %s: %v", name, status)
		}
		if want, found := w.score[name]; found && score != want {
			t.Errorf("Score %s: %d, want %d", name, score, want)
		}
	}
	node := passed[0]
	status = pl.Reserve(ctx, cs, pod, node)
	w.reserve.check(t, "Reserve", status)
	if !status.IsSuccess() {
		pl.Unreserve(ctx, cs, pod, node)
		return
	}
	status = pl.PreBind(ctx, cs, pod, node)
	w.preBind.check(t, "PreBind", status)
	if !status.IsSuccess() || w.unreserve {
		pl.Unreserve(ctx, cs, pod, node)
	}
}

func (env *pluginEnv) apiClaim(t *testing.T, name string) *resourceapi.ResourceClaim {
	t.Helper()
	claim, err := env.client.ResourceV1().ResourceClaims("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return claim
}

func allocatedTo(device string, pod types.UID) func(*resourceapi.ResourceClaim) error {
	return func(claim *resourceapi.ResourceClaim) error {
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 || claim.Status.Allocation.Devices.Results[0].Device != device {
			return fmt.Errorf("allocation %v, want %s", claim.Status.Allocation, device)
		}
		if !slices.Contains(claim.Finalizers, resourceapi.Finalizer) {
			return errors.New("no finalizer")
		}
		if pod != "" && !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == pod }) {
			return fmt.Errorf("reservedFor %v lacks pod %s", claim.Status.ReservedFor, pod)
		}
		if pod == "" && len(claim.Status.ReservedFor) > 0 {
			return fmt.Errorf("reservedFor %v, want none", claim.Status.ReservedFor)
		}
		return nil
	}
}

func unallocated(claim *resourceapi.ResourceClaim) error {
	if claim.Status.Allocation != nil || len(claim.Status.ReservedFor) > 0 {
		return fmt.Errorf("status %+v, want none", claim.Status)
	}
	return nil
}

// conflictOnce fails the first status update of claims with a conflict.
func conflictOnce(env *pluginEnv) {
	var done atomic.Bool
	env.client.PrependReactor("update", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "status" && done.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewConflict(resourceapi.Resource("resourceclaims"), "gpu", errors.New("changed"))
		}
		return false, nil, nil
	})
}

// lostResponse lets status updates of claims through to the fake API but
// answers the first n of them with a 504, as a proxy that loses the
// response does.
func lostResponse(n int32, applied bool) func(env *pluginEnv) {
	return func(env *pluginEnv) {
		var count atomic.Int32
		tracker := env.client.Tracker()
		env.client.PrependReactor("update", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if action.GetSubresource() != "status" || count.Add(1) > n {
				return false, nil, nil
			}
			if applied {
				claim := action.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim).DeepCopy()
				claim.ResourceVersion = fmt.Sprintf("%d", 900+count.Load())
				if err := tracker.Update(action.GetResource(), claim, claim.Namespace, metav1.UpdateOptions{}); err != nil {
					return true, nil, err
				}
			}
			return true, nil, apierrors.NewTimeoutError("the server was unable to return a response in the time allotted", 0)
		})
		// An update's precondition: the fake applies whatever it gets, the
		// API server compares resourceVersions.
		env.client.PrependReactor("update", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
			update := action.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceClaim)
			current, err := tracker.Get(action.GetResource(), update.Namespace, update.Name)
			if err == nil && current.(*resourceapi.ResourceClaim).ResourceVersion != update.ResourceVersion {
				return true, nil, apierrors.NewConflict(resourceapi.Resource("resourceclaims"), update.Name, errors.New("resourceVersion changed"))
			}
			return false, nil, nil
		})
	}
}

// fastRetries shortens PreBind's backoff.
func fastRetries(t *testing.T) {
	saved := writeBackoff
	writeBackoff = wait.Backoff{Steps: 4, Duration: time.Millisecond, Factor: 1}
	t.Cleanup(func() { writeBackoff = saved })
}

// toNodeA completes a want for a pod that fits on node-a only, where the
// one-GPU slice is, up to PreBind.
func toNodeA(w want) want {
	w.preEnqueue, w.preFilter, w.reserve = ok(), ok(), ok()
	w.filter = map[string]*wantStatus{"node-a": ok(), "node-b": unresolvable("no device matches")}
	return w
}

func TestPlugin(t *testing.T) {
	const podUID types.UID = "pod-uid"
	class := builder.MakeClass(gpuClass)
	testcases := map[string]testCase{
		"no claims": {
			pod: builder.MakePod("pod").Obj(),
			want: want{
				preEnqueue: ok(),
				preFilter:  &wantStatus{code: fwk.Skip},
				filter:     map[string]*wantStatus{"node-a": ok(), "node-b": ok()},
				score:      map[string]int64{"node-a": 0, "node-b": 0},
				reserve:    ok(),
				preBind:    ok(),
			},
		},
		"claim missing": {
			pod: podWithClaims("gpu"),
			want: want{
				preEnqueue: unresolvable(`waiting for resource claim default/gpu`),
				preFilter:  unresolvable(`waiting for resource claim default/gpu`),
			},
		},
		"claim being deleted": {
			pod: podWithClaims("gpu"),
			objects: []runtime.Object{func() *resourceapi.ResourceClaim {
				c := gpuClaim("gpu").Obj()
				c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				return c
			}()},
			want: want{preEnqueue: unresolvable(`resourceclaim "gpu" is being deleted`)},
		},
		"class missing": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1)},
			want: want{
				preEnqueue: ok(),
				preFilter:  unresolvable("device class gpu.example.com does not exist"),
			},
		},
		"allocate": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(2), class},
			want: want{
				preEnqueue: ok(),
				preFilter:  ok(),
				filter: map[string]*wantStatus{
					"node-a": ok(),
					"node-b": unresolvable(`request "gpu": no device matches`),
				},
				// One of node-a's two GPUs in use once allocated.
				score:        map[string]int64{"node-a": 50},
				reserve:      ok(),
				preBind:      ok(),
				writes:       []string{"update resourceclaims", "update resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "Written default/gpu"},
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": allocatedTo("gpu-0", podUID)},
			},
		},
		"device in use": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), allocated(gpuClaim("other"), "gpu-0", "other-pod"), gpuSlice(1), class},
			want: want{
				preEnqueue: ok(),
				preFilter:  ok(),
				filter: map[string]*wantStatus{
					"node-a": unresolvable(`request "gpu": 0 of 1 matching devices free`),
					"node-b": unresolvable(`no device matches`),
				},
				postFilter: &wantStatus{code: fwk.Unschedulable},
				claim:      map[string]func(*resourceapi.ResourceClaim) error{"gpu": unallocated},
			},
		},
		"device in flight for another pod": {
			pod:      podWithClaims("gpu"),
			objects:  []runtime.Object{gpuClaim("gpu").Obj(), gpuClaim("other").Obj(), gpuSlice(1), class},
			inFlight: []*resourceapi.ResourceClaim{allocated(gpuClaim("other"), "gpu-0")},
			want: want{
				preEnqueue: ok(),
				preFilter:  ok(),
				filter: map[string]*wantStatus{
					"node-a": unresolvable(`0 of 1 matching devices free`),
					"node-b": unresolvable(`no device matches`),
				},
				postFilter:   &wantStatus{code: fwk.Unschedulable},
				trackerCalls: []string{"Reserve default/other"},
				inFlight:     1,
			},
		},
		"claim in flight for another pod": {
			pod:      podWithClaims("gpu"),
			objects:  []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			inFlight: []*resourceapi.ResourceClaim{allocated(gpuClaim("gpu"), "gpu-0")},
			want: want{
				preEnqueue:   ok(),
				preFilter:    unresolvable("resource claim default/gpu is in the process of being allocated"),
				trackerCalls: []string{"Reserve default/gpu"},
				inFlight:     1,
			},
		},
		"allocated, reserve only": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{allocated(gpuClaim("gpu"), "gpu-0"), gpuSlice(1), class},
			want: want{
				preEnqueue:     ok(),
				preFilter:      ok(),
				preFilterNodes: sets.New("node-a"),
				filter: map[string]*wantStatus{
					"node-a": ok(),
					"node-b": unresolvable("resourceclaim not available on the node"),
				},
				reserve:      ok(),
				preBind:      ok(),
				writes:       []string{"update resourceclaims/status"},
				trackerCalls: []string{"Written default/gpu"},
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": allocatedTo("gpu-0", podUID)},
			},
		},
		"generated claim of another pod": {
			pod: func() *v1.Pod {
				pod := builder.MakePod("pod").ClaimFromTemplate("gpu", "template").Obj()
				pod.UID = podUID
				pod.Status.ResourceClaimStatuses = []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("pod-gpu-x1")}}
				return pod
			}(),
			objects: []runtime.Object{gpuClaim("pod-gpu-x1").Obj(), gpuSlice(1), class},
			want:    want{preEnqueue: unresolvable("pod-gpu-x1 was not created for")},
		},
		"allocation unusable everywhere: PostFilter deallocates": {
			pod: podWithClaims("gpu"),
			objects: []runtime.Object{func() *resourceapi.ResourceClaim {
				c := allocated(gpuClaim("gpu"), "gpu-0")
				c.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values = []string{"node-gone"}
				return c
			}(), class},
			want: want{
				preEnqueue:     ok(),
				preFilter:      ok(),
				preFilterNodes: sets.New("node-gone"),
				filter: map[string]*wantStatus{
					"node-a": unresolvable("resourceclaim not available on the node"),
					"node-b": unresolvable("resourceclaim not available on the node"),
				},
				postFilter: &wantStatus{code: fwk.Unschedulable, message: "deallocation of ResourceClaim completed"},
				writes:     []string{"update resourceclaims/status"},
				claim:      map[string]func(*resourceapi.ResourceClaim) error{"gpu": unallocated},
			},
		},
		"allocation unusable everywhere, reserved for another pod: kept": {
			pod: podWithClaims("gpu"),
			objects: []runtime.Object{func() *resourceapi.ResourceClaim {
				c := allocated(gpuClaim("gpu"), "gpu-0", "other-pod")
				c.Status.Allocation.NodeSelector.NodeSelectorTerms[0].MatchFields[0].Values = []string{"node-gone"}
				return c
			}(), class},
			want: want{
				preEnqueue:     ok(),
				preFilter:      ok(),
				preFilterNodes: sets.New("node-gone"),
				filter: map[string]*wantStatus{
					"node-a": unresolvable("resourceclaim not available on the node"),
					"node-b": unresolvable("resourceclaim not available on the node"),
				},
				postFilter: &wantStatus{code: fwk.Unschedulable},
			},
		},
		"allocated by someone else since PreFilter": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: func(env *pluginEnv) {
				// The claim cache learns of the allocation between Filter
				// and Reserve.
				env.plugin.tracker = &allocateBeforeReserve{Fake: env.tracker}
			},
			want: want{
				preEnqueue:   ok(),
				preFilter:    ok(),
				filter:       map[string]*wantStatus{"node-a": ok(), "node-b": unresolvable("no device matches")},
				reserve:      failed("claim is already allocated"),
				trackerCalls: []string{"Reserve default/gpu"},
			},
		},
		"binding fails after PreBind: Unreserve removes the reservation, keeps the allocation": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			want: toNodeA(want{
				preBind:      ok(),
				unreserve:    true,
				writes:       []string{"update resourceclaims", "update resourceclaims/status", "patch resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "Written default/gpu"},
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": allocatedTo("gpu-0", "")},
			}),
		},
		"PreBind conflict: retried from a fresh read": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: conflictOnce,
			want: toNodeA(want{
				preBind:      ok(),
				writes:       []string{"update resourceclaims", "update resourceclaims/status", "update resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "Written default/gpu"},
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": allocatedTo("gpu-0", podUID)},
			}),
		},
		"PreBind response lost, write landed: found by the retry's conflict": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: lostResponse(1, true),
			want: toNodeA(want{
				preBind: ok(),
				// The lost write, its retry (conflict); then a read.
				writes:       []string{"update resourceclaims", "update resourceclaims/status", "update resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "Written default/gpu"},
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": allocatedTo("gpu-0", podUID)},
			}),
		},
		"PreBind response lost, write not applied: the retry writes": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: lostResponse(1, false),
			want: toNodeA(want{
				preBind:      ok(),
				writes:       []string{"update resourceclaims", "update resourceclaims/status", "update resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "Written default/gpu"},
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": allocatedTo("gpu-0", podUID)},
			}),
		},
		"PreBind outcome stays unknown: the allocation stays in flight": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: lostResponse(100, false),
			want: toNodeA(want{
				preBind: failed("the server was unable to return a response"),
				writes: []string{"update resourceclaims", "update resourceclaims/status", "update resourceclaims/status",
					"update resourceclaims/status", "update resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "WriteUnknown default/gpu"},
				inFlight:     1,
				claim:        map[string]func(*resourceapi.ResourceClaim) error{"gpu": unallocated},
			}),
		},
		"claim replaced under the same name during PreBind": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: func(env *pluginEnv) {
				// Deleted and created again just before PreBind's status
				// write: the write conflicts, the read finds another UID.
				var done atomic.Bool
				env.client.PrependReactor("update", "resourceclaims", func(action k8stesting.Action) (bool, runtime.Object, error) {
					if action.GetSubresource() != "status" || !done.CompareAndSwap(false, true) {
						return false, nil, nil
					}
					replacement := gpuClaim("gpu").Obj()
					replacement.UID, replacement.ResourceVersion = "uid-gpu-2", "500"
					if err := env.client.Tracker().Update(action.GetResource(), replacement, "default", metav1.UpdateOptions{}); err != nil {
						return true, nil, err
					}
					return true, nil, apierrors.NewConflict(resourceapi.Resource("resourceclaims"), "gpu", errors.New("changed"))
				})
			},
			want: toNodeA(want{
				preBind:      failed("claim was replaced by another claim of the same name"),
				writes:       []string{"update resourceclaims", "update resourceclaims/status"},
				trackerCalls: []string{"Reserve default/gpu", "Unreserve default/gpu"},
				claim: map[string]func(*resourceapi.ResourceClaim) error{"gpu": func(c *resourceapi.ResourceClaim) error {
					if c.UID != "uid-gpu-2" {
						return fmt.Errorf("UID %s, want the replacement's", c.UID)
					}
					return unallocated(c)
				}},
			}),
		},
		"lease lost: no write": {
			pod:     podWithClaims("gpu"),
			objects: []runtime.Object{gpuClaim("gpu").Obj(), gpuSlice(1), class},
			prepare: func(env *pluginEnv) {
				fence := leaderfence.New(time.Second)
				if _, err := fence.Wrap(nil, 2*time.Second); err != nil {
					panic(err)
				}
				env.plugin.fence = fence
			},
			want: want{
				preEnqueue: ok(),
				// A leader that never renewed does not allocate at all.
				preFilter: failed("not the leader"),
			},
		},
	}
	for name, tc := range testcases {
		t.Run(name, func(t *testing.T) {
			fastRetries(t)
			env := newPluginEnv(t, tc.pod, tc.objects...)
			for _, claim := range tc.inFlight {
				if err := env.tracker.Reserve(claim); err != nil {
					t.Fatal(err)
				}
			}
			if tc.prepare != nil {
				tc.prepare(env)
			}
			env.walk(t, tc.pod, tc.want)
			if diff := cmp.Diff(tc.want.writes, env.writes()); diff != "" {
				t.Errorf("API writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want.trackerCalls, env.tracker.Calls()); diff != "" {
				t.Errorf("tracker calls (-want +got):\n%s", diff)
			}
			if got := len(env.tracker.InFlight()); got != tc.want.inFlight {
				t.Errorf("%d allocations in flight, want %d", got, tc.want.inFlight)
			}
			for name, check := range tc.want.claim {
				if err := check(env.apiClaim(t, name)); err != nil {
					t.Errorf("claim %s: %v", name, err)
				}
			}
		})
	}
}

// allocateBeforeReserve is a tracker whose claim cache learns, right
// before Reserve, that the claim got allocated elsewhere.
type allocateBeforeReserve struct{ *trackertest.Fake }

func (a *allocateBeforeReserve) Reserve(claim *resourceapi.ResourceClaim) error {
	current, err := a.Claim(claim.Namespace, claim.Name)
	if err == nil && current.Status.Allocation == nil {
		a.Add(allocated(gpuClaim(claim.Name), "gpu-0", "other-pod"))
	}
	return a.Fake.Reserve(claim)
}

var _ tracker.Interface = &allocateBeforeReserve{}

// snapshotHandle adds the scheduler's snapshot of nodes to testHandle.
type snapshotHandle struct {
	testHandle
	nodes map[string]fwk.NodeInfo
}

func (h snapshotHandle) SnapshotSharedLister() fwk.SharedLister {
	return snapshotLister{nodes: nodeInfoLister{nodes: h.nodes}}
}

// snapshotLister serves the nodes only.
type snapshotLister struct {
	fwk.SharedLister
	nodes nodeInfoLister
}

func (l snapshotLister) NodeInfos() fwk.NodeInfoLister { return l.nodes }

// nodeInfoLister serves the given nodes.
type nodeInfoLister struct {
	fwk.NodeInfoLister
	nodes map[string]fwk.NodeInfo
}

func (l nodeInfoLister) Get(name string) (fwk.NodeInfo, error) {
	if n, ok := l.nodes[name]; ok {
		return n, nil
	}
	return nil, errors.New("not found")
}
