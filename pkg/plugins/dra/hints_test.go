package dra

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor/schedminor"
)

// The hint tables check each queueing hint's answer for the events that
// matter and that it only reads: the tracker sees no call.

// hintEnv is the plugin on a fake tracker holding the objects; the pod is
// in the pod index.
func hintEnv(t *testing.T, pod *v1.Pod, objects ...runtime.Object) *pluginEnv {
	t.Helper()
	return newPluginEnv(t, pod, objects...)
}

func checkPure(t *testing.T, env *pluginEnv) {
	t.Helper()
	if calls := env.tracker.Calls(); len(calls) > 0 {
		t.Errorf("a hint changed the tracker: %v", calls)
	}
	if writes := env.writes(); len(writes) > 0 {
		t.Errorf("a hint wrote to the API: %v", writes)
	}
}

// checkHint fails unless a hint answered want without an error and
// without changing anything.
func checkHint(t *testing.T, env *pluginEnv, got fwk.QueueingHint, err error, want fwk.QueueingHint) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("hint %v, want %v", got, want)
	}
	checkPure(t, env)
}

func TestClaimHint(t *testing.T) {
	pod := podWithClaims("gpu")
	unallocatedGPU := gpuClaim("gpu").Obj()
	allocatedGPU := allocated(gpuClaim("gpu"), "gpu-0")
	withFinalizer := unallocatedGPU.DeepCopy()
	withFinalizer.Finalizers = []string{resourceapi.Finalizer}
	other := gpuClaim("other").Obj()
	allocatedOther := allocated(gpuClaim("other"), "gpu-0", "other-pod")

	for name, tc := range map[string]struct {
		// inCache is the claim cache's version of the pod's claim.
		inCache        *resourceapi.ResourceClaim
		oldObj, newObj any
		want           fwk.QueueingHint
	}{
		"pod's claim created": {
			inCache: unallocatedGPU, newObj: unallocatedGPU, want: fwk.Queue,
		},
		"pod's claim status changed": {
			inCache: allocatedGPU, oldObj: unallocatedGPU, newObj: allocatedGPU, want: fwk.Queue,
		},
		"pod's claim got a finalizer": {
			inCache: withFinalizer, oldObj: unallocatedGPU, newObj: withFinalizer, want: fwk.QueueSkip,
		},
		"another claim created": {
			inCache: unallocatedGPU, newObj: other, want: fwk.QueueSkip,
		},
		"another claim allocated": {
			inCache: unallocatedGPU, oldObj: other, newObj: allocatedOther, want: fwk.QueueSkip,
		},
		"another claim deallocated: devices free": {
			inCache: unallocatedGPU, oldObj: allocatedOther, newObj: other, want: fwk.Queue,
		},
		"allocated claim deleted: devices free": {
			inCache: unallocatedGPU, oldObj: allocatedOther, want: fwk.Queue,
		},
		"unallocated claim deleted": {
			inCache: unallocatedGPU, oldObj: other, want: fwk.QueueSkip,
		},
		"deleted with unknown final state": {
			inCache: unallocatedGPU, oldObj: cache.DeletedFinalStateUnknown{Key: "default/other", Obj: other}, want: fwk.Queue,
		},
		"pod's claims still missing": {
			newObj: other, want: fwk.QueueSkip,
		},
	} {
		t.Run(name, func(t *testing.T) {
			var objects []runtime.Object
			if tc.inCache != nil {
				objects = append(objects, tc.inCache)
			}
			env := hintEnv(t, pod, objects...)
			logger, _ := ktesting.NewTestContext(t)
			got, err := env.plugin.afterClaimChange(logger, pod, tc.oldObj, tc.newObj)
			checkHint(t, env, got, err, tc.want)
		})
	}
}

// namesClaim decides the claim hint for every pending pod and claim event
// without a lookup: it must find every claim podClaims would return.
func TestNamesClaim(t *testing.T) {
	byName := podWithClaims("gpu")
	fromTemplate := builder.MakePod("pod").ClaimFromTemplate("gpu", "template").ClaimStatus("gpu", "pod-gpu-x1").Obj()
	waiting := builder.MakePod("pod").ClaimFromTemplate("gpu", "template").Obj()
	for name, tc := range map[string]struct {
		pod   *v1.Pod
		claim *resourceapi.ResourceClaim
		want  bool
	}{
		"claim by name":                    {pod: byName, claim: gpuClaim("gpu").Obj(), want: true},
		"another claim":                    {pod: byName, claim: gpuClaim("other").Obj()},
		"same name, another namespace":     {pod: byName, claim: gpuClaim("gpu").Namespace("elsewhere").Obj()},
		"generated claim named in status":  {pod: fromTemplate, claim: gpuClaim("pod-gpu-x1").Obj(), want: true},
		"generated claim not named yet":    {pod: waiting, claim: gpuClaim("pod-gpu-x1").Obj()},
		"template's name is not the claim": {pod: fromTemplate, claim: gpuClaim("template").Obj()},
	} {
		t.Run(name, func(t *testing.T) {
			if got := namesClaim(tc.pod, tc.claim); got != tc.want {
				t.Errorf("namesClaim = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestClaimPreQueueingHint(t *testing.T) {
	pod := podWithClaims("gpu")
	other := builder.MakePod("other").Claim("x", "unrelated").Obj()
	extendedClaim := gpuClaim("pod-extended-resources-x1").Obj()
	extendedClaim.Annotations = map[string]string{resourceapi.ExtendedResourceClaimAnnotation: "true"}
	extendedClaim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "ext-pod", UID: "ext-uid", Controller: ptr.To(true)}}

	for name, tc := range map[string]struct {
		oldObj, newObj any
		want           schedminor.PreQueueingHintResult
	}{
		"claim of a pod": {
			newObj: gpuClaim("gpu").Obj(),
			want:   schedminor.PreQueueingHintResult{Pods: []types.NamespacedName{{Namespace: "default", Name: "pod"}}},
		},
		"claim of no pod": {
			newObj: gpuClaim("nobody").Obj(),
			want:   schedminor.PreQueueingHintResult{Pods: []types.NamespacedName{}},
		},
		"deallocation: every pod": {
			oldObj: allocated(gpuClaim("nobody"), "gpu-0"), newObj: gpuClaim("nobody").Obj(),
			want: schedminor.PreQueueingHintResult{AllPods: true},
		},
		"deletion of an allocated claim: every pod": {
			oldObj: allocated(gpuClaim("nobody"), "gpu-0"),
			want:   schedminor.PreQueueingHintResult{AllPods: true},
		},
		"claim for extended resources: its owner": {
			newObj: extendedClaim,
			want:   schedminor.PreQueueingHintResult{Pods: []types.NamespacedName{{Namespace: "default", Name: "ext-pod"}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			env := hintEnv(t, pod)
			if err := env.plugin.podsByClaim.Add(other); err != nil {
				t.Fatal(err)
			}
			logger, _ := ktesting.NewTestContext(t)
			got, err := env.plugin.podsForClaim(logger, tc.oldObj, tc.newObj)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			checkPure(t, env)
		})
	}
}

func TestPodHint(t *testing.T) {
	template := func(status ...v1.PodResourceClaimStatus) *v1.Pod {
		pod := builder.MakePod("pod").ClaimFromTemplate("gpu", "template").Obj()
		pod.UID = "pod-uid"
		pod.Status.ResourceClaimStatuses = status
		return pod
	}
	generated := gpuClaim("pod-gpu-x1").Obj()
	generated.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "pod", UID: "pod-uid", Controller: ptr.To(true)}}

	for name, tc := range map[string]struct {
		pod  *v1.Pod
		want fwk.QueueingHint
	}{
		"claim name not in the status yet": {pod: template(), want: fwk.QueueSkip},
		"claim named and known": {
			pod:  template(v1.PodResourceClaimStatus{Name: "gpu", ResourceClaimName: ptr.To("pod-gpu-x1")}),
			want: fwk.Queue,
		},
		"claim named, not in the cache yet": {
			pod:  template(v1.PodResourceClaimStatus{Name: "gpu", ResourceClaimName: ptr.To("pod-gpu-y2")}),
			want: fwk.QueueSkip,
		},
	} {
		t.Run(name, func(t *testing.T) {
			env := hintEnv(t, template(), generated)
			logger, _ := ktesting.NewTestContext(t)
			got, err := env.plugin.afterPodUpdate(logger, template(), template(), tc.pod)
			checkHint(t, env, got, err, tc.want)
		})
	}
}

// A pod deletion requeues a pod that may be the deleted pod's preemptor:
// the deleted pod held claims and was on the node the pod is nominated to,
// or had a lower priority (the pod's copy may not show its nomination yet).
func TestAssignedPodDeleteHint(t *testing.T) {
	preemptor := func(nominated string) *v1.Pod {
		pod := builder.MakePod("preemptor").ClaimFromTemplate("gpu", "template").Obj()
		pod.Spec.Priority = ptr.To[int32](1000)
		pod.Status.NominatedNodeName = nominated
		return pod
	}
	deleted := func(node string, priority int32, claims bool) *v1.Pod {
		w := builder.MakePod("victim")
		if claims {
			w = w.ClaimFromTemplate("gpu", "template")
		}
		pod := w.Obj()
		pod.Spec.NodeName = node
		pod.Spec.Priority = ptr.To(priority)
		return pod
	}
	for name, tc := range map[string]struct {
		pod, deleted *v1.Pod
		want         fwk.QueueingHint
	}{
		"victim on the nominated node":                  {pod: preemptor("node-a"), deleted: deleted("node-a", 1000, true), want: fwk.Queue},
		"lower priority, nomination not seen yet":       {pod: preemptor(""), deleted: deleted("node-a", 10, true), want: fwk.Queue},
		"equal priority on another node":                {pod: preemptor("node-b"), deleted: deleted("node-a", 1000, true), want: fwk.QueueSkip},
		"lower priority without claims":                 {pod: preemptor("node-a"), deleted: deleted("node-a", 10, false), want: fwk.QueueSkip},
		"never bound":                                   {pod: preemptor(""), deleted: deleted("", 10, true), want: fwk.QueueSkip},
		"extended resource claim on the nominated node": {pod: preemptor("node-a"), deleted: withExtendedClaim(deleted("node-a", 1000, false)), want: fwk.Queue},
	} {
		t.Run(name, func(t *testing.T) {
			env := hintEnv(t, tc.pod)
			logger, _ := ktesting.NewTestContext(t)
			got, err := env.plugin.afterAssignedPodDelete(logger, tc.pod, tc.deleted, nil)
			checkHint(t, env, got, err, tc.want)
		})
	}
}

func withExtendedClaim(pod *v1.Pod) *v1.Pod {
	pod.Status.ExtendedResourceClaimStatus = &v1.PodExtendedResourceClaimStatus{ResourceClaimName: "victim-extended-resources-x1"}
	return pod
}

func TestClassHint(t *testing.T) {
	pod := podWithClaims("gpu")
	class := builder.MakeClass(gpuClass)
	changed := builder.MakeClass(gpuClass, `device.driver == "gpu.example.com"`)
	otherClass := builder.MakeClass("other.example.com")
	for name, tc := range map[string]struct {
		claim          *resourceapi.ResourceClaim
		oldObj, newObj *resourceapi.DeviceClass
		want           fwk.QueueingHint
	}{
		"class of a request created":          {claim: gpuClaim("gpu").Obj(), newObj: class, want: fwk.Queue},
		"class of a request changed":          {claim: gpuClaim("gpu").Obj(), oldObj: class, newObj: changed, want: fwk.Queue},
		"class of a request, metadata only":   {claim: gpuClaim("gpu").Obj(), oldObj: class, newObj: withLabel(class), want: fwk.QueueSkip},
		"another class created":               {claim: gpuClaim("gpu").Obj(), newObj: otherClass, want: fwk.QueueSkip},
		"class of an allocated claim changed": {claim: allocated(gpuClaim("gpu"), "gpu-0"), oldObj: class, newObj: changed, want: fwk.QueueSkip},
		"claim missing":                       {newObj: class, want: fwk.QueueSkip},
	} {
		t.Run(name, func(t *testing.T) {
			var objects []runtime.Object
			if tc.claim != nil {
				objects = append(objects, tc.claim)
			}
			env := hintEnv(t, pod, objects...)
			logger, _ := ktesting.NewTestContext(t)
			var oldObj any
			if tc.oldObj != nil {
				oldObj = tc.oldObj
			}
			got, err := env.plugin.afterClassChange(logger, pod, oldObj, tc.newObj)
			checkHint(t, env, got, err, tc.want)
		})
	}
}

func withLabel(class *resourceapi.DeviceClass) *resourceapi.DeviceClass {
	class = class.DeepCopy()
	class.Labels = map[string]string{"team": "ml"}
	return class
}

func TestSliceHint(t *testing.T) {
	pod := podWithClaims("gpu")
	class := builder.MakeClass(gpuClass, `device.attributes["gpu.example.com"].model == "H100"`)
	h100 := builder.MakeSlice("node-a").Node("node-a").Devices(builder.MakeDevice("gpu-0").String("model", "H100")).Obj()
	l40s := builder.MakeSlice("node-a").Node("node-a").Devices(builder.MakeDevice("gpu-0").String("model", "L40S")).Obj()
	h100Relabelled := h100.DeepCopy()
	h100Relabelled.Labels = map[string]string{"rack": "7"}
	// A pool of two slices: the one with the H100 is known, the new one
	// has no matching device but completes the pool.
	firstOfTwo := builder.MakeSlice("pool-0").Pool("pool", 1, 2).Node("node-b").Devices(builder.MakeDevice("gpu-0").String("model", "H100")).Obj()
	secondOfTwo := builder.MakeSlice("pool-1").Pool("pool", 1, 2).Node("node-b").Devices(builder.MakeDevice("nic-0")).Obj()

	for name, tc := range map[string]struct {
		claim          *resourceapi.ResourceClaim
		known          []*resourceapi.ResourceSlice
		oldObj, newObj *resourceapi.ResourceSlice
		want           fwk.QueueingHint
	}{
		"matching device added":     {claim: gpuClaim("gpu").Obj(), newObj: h100, want: fwk.Queue},
		"no matching device":        {claim: gpuClaim("gpu").Obj(), newObj: l40s, want: fwk.QueueSkip},
		"metadata only":             {claim: gpuClaim("gpu").Obj(), known: []*resourceapi.ResourceSlice{h100}, oldObj: h100, newObj: h100Relabelled, want: fwk.QueueSkip},
		"completes a matching pool": {claim: gpuClaim("gpu").Obj(), known: []*resourceapi.ResourceSlice{firstOfTwo}, newObj: secondOfTwo, want: fwk.Queue},
		"deleted, pool still has a match": {
			claim: gpuClaim("gpu").Obj(), known: []*resourceapi.ResourceSlice{firstOfTwo}, oldObj: secondOfTwo, want: fwk.Queue,
		},
		"deleted, nothing left": {claim: gpuClaim("gpu").Obj(), oldObj: h100, want: fwk.QueueSkip},
		"pod's claim allocated": {claim: allocated(gpuClaim("gpu"), "gpu-0"), newObj: h100, want: fwk.QueueSkip},
	} {
		t.Run(name, func(t *testing.T) {
			objects := []runtime.Object{class, tc.claim}
			for _, s := range tc.known {
				objects = append(objects, s)
			}
			env := hintEnv(t, pod, objects...)
			logger, _ := ktesting.NewTestContext(t)
			var oldObj, newObj any
			if tc.oldObj != nil {
				oldObj = tc.oldObj
			}
			if tc.newObj != nil {
				newObj = tc.newObj
			}
			got, err := env.plugin.afterSliceChange(logger, pod, oldObj, newObj)
			checkHint(t, env, got, err, tc.want)
		})
	}
}

// TestSliceHintBudget: the slice hint spends at most hintCostBudget on CEL
// evaluations the cache does not hold. A selector that takes most of the
// API server's cost limit on each device (builder.SlowSelector) gets one
// evaluation per hint, and the pod is queued (Filter, under filterTimeout,
// decides); each later hint resumes where the last stopped, and the one
// that evaluates the last device answers exactly. A selector of ordinary
// cost is answered exactly on a pool of 2,048 devices.
func TestSliceHintBudget(t *testing.T) {
	pod := podWithClaims("gpu")
	logger, _ := ktesting.NewTestContext(t)
	t.Run("slow selector", func(t *testing.T) {
		const devices = 4
		slice := builder.MakeSlice("node-a").Node("node-a").Devices(builder.Devices("gpu", devices, func(_ int, d *builder.DeviceWrapper) { d.Int("index", -1) })...).Obj()
		claim := builder.MakeClaim("gpu").Request("gpu", gpuClass, 1, builder.SlowSelector(gpuClass, "index")).Obj()
		env := hintEnv(t, pod, builder.MakeClass(gpuClass), claim)
		for i := range devices {
			// The last device's result, evaluated within the budget,
			// completes the answer: no device matches.
			want := fwk.Queue
			if i == devices-1 {
				want = fwk.QueueSkip
			}
			got, err := env.plugin.afterSliceChange(logger, pod, nil, slice)
			checkHint(t, env, got, err, want)
			if evaluated := env.plugin.cache.Stats().MatchMisses; evaluated != int64(i+1) {
				t.Fatalf("after hint %d: %d evaluations, want %d", i+1, evaluated, i+1)
			}
		}
	})
	t.Run("ordinary selector, large pool", func(t *testing.T) {
		const slices = 16
		var pool []runtime.Object
		for i := range slices {
			pool = append(pool, builder.MakeSlice(fmt.Sprintf("node-a-%d", i)).Node("node-a").Pool("node-a", 1, slices).
				Devices(builder.Devices(fmt.Sprintf("gpu-%d", i), resourceapi.ResourceSliceMaxDevices, func(_ int, d *builder.DeviceWrapper) { d.String("model", "L40S") })...).Obj())
		}
		claim := builder.MakeClaim("gpu").Request("gpu", gpuClass, 1, `device.attributes["gpu.example.com"].model == "H100"`).Obj()
		class := builder.MakeClass(gpuClass, `device.driver == "gpu.example.com"`)
		env := hintEnv(t, pod, append(pool, class, claim)...)
		got, err := env.plugin.afterSliceChange(logger, pod, nil, pool[0])
		checkHint(t, env, got, err, fwk.QueueSkip)
		if evaluated := env.plugin.cache.Stats().MatchMisses; evaluated != 2*slices*resourceapi.ResourceSliceMaxDevices {
			t.Errorf("%d evaluations, want both selectors on every device", evaluated)
		}
	})
}
