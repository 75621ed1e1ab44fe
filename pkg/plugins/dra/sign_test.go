package dra

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/internal/minor"
	"github.com/drasched/drasched/pkg/tracker"
)

// signedPod is a pod with one claim from template "gpus", named claimName
// in its status, and the claim generated for it with the spec of c.
func signedPod(name, claimName string, c *builder.ClaimWrapper) (*v1.Pod, *resourceapi.ResourceClaim) {
	pod := builder.MakePod(name).UID(name+"-uid").ClaimFromTemplate("gpu", "gpus").ClaimStatus("gpu", claimName).Obj()
	claim := c.Obj().DeepCopy()
	claim.Name, claim.UID = claimName, types.UID(claimName+"-uid")
	claim.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: name, UID: pod.UID, Controller: ptr.To(true)}}
	return pod, claim
}

// signature is SignPod's fragment as the framework marshals it; "" for an
// unsignable pod, "-" for a pod without a fragment.
func signature(t *testing.T, env *pluginEnv, pod *v1.Pod) string {
	t.Helper()
	fragments, status := env.plugin.SignPod(env.ctx, pod)
	switch {
	case status.Code() == fwk.Unschedulable:
		return ""
	case !status.IsSuccess():
		t.Fatalf("SignPod: %v", status)
	case len(fragments) == 0:
		return "-"
	}
	if len(fragments) != 1 || fragments[0].Key != signKey {
		t.Fatalf("fragments %+v, want one with key %s", fragments, signKey)
	}
	data, err := json.Marshal(fragments[0].Value)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestSignPod(t *testing.T) {
	localSlice := builder.MakeSlice("node-a-gpus").Node("node-a").Obj()
	networkSlice := builder.MakeSlice("fabric").AllNodes().Obj()
	pod, claim := signedPod("pod", "pod-gpu-1", gpuClaim(""))
	other, otherClaim := signedPod("other", "other-gpu-1", gpuClaim(""))
	twoGPUs, twoGPUsClaim := signedPod("two", "two-gpu-1", builder.MakeClaim("").Request("gpu", gpuClass, 2))

	// The reference: pod and its claim, on a node-local slice.
	want := signature(t, newPluginEnv(t, nil, claim, localSlice), pod)
	if want == "" || want == "-" {
		t.Fatalf("the reference pod got no signature (%q)", want)
	}

	for name, tc := range map[string]struct {
		pod     *v1.Pod
		objects []runtime.Object
		prepare func(env *pluginEnv)
		// objects are in the cluster besides a node-local slice.
		// same: the pod's signature equals that of pod with its claim;
		// unsignable: it has none.
		same, unsignable bool
	}{
		"another pod of the same template": {
			pod: other, objects: []runtime.Object{otherClaim}, same: true,
		},
		"another spec": {
			pod: twoGPUs, objects: []runtime.Object{twoGPUsClaim},
		},
		"another priority": {
			pod: func() *v1.Pod {
				p := other.DeepCopy()
				p.Spec.Priority = ptr.To[int32](1000)
				return p
			}(),
			objects: []runtime.Object{otherClaim},
		},
		"claim not in the cache": {
			pod: other, unsignable: true,
		},
		"claim name not in the pod's status yet": {
			pod: builder.MakePod("other").UID("other-uid").ClaimFromTemplate("gpu", "gpus").Obj(), objects: []runtime.Object{otherClaim}, unsignable: true,
		},
		"claim by name": {
			pod: func() *v1.Pod {
				p := podWithClaims("other-gpu-1")
				p.Name, p.UID = "other", "other-uid"
				return p
			}(),
			objects: []runtime.Object{otherClaim}, unsignable: true,
		},
		"claim of another pod": {
			pod: other, objects: []runtime.Object{func() *resourceapi.ResourceClaim {
				c := claim.DeepCopy()
				c.Name = "other-gpu-1"
				return c
			}()},
			unsignable: true,
		},
		"claim allocated": {
			pod: other, objects: []runtime.Object{func() *resourceapi.ResourceClaim {
				c := otherClaim.DeepCopy()
				c.Status.Allocation = allocated(gpuClaim(""), "gpu-0").Status.Allocation
				return c
			}()},
			unsignable: true,
		},
		"claim in flight": {
			pod: other, objects: []runtime.Object{otherClaim}, prepare: func(env *pluginEnv) {
				c := otherClaim.DeepCopy()
				c.Status.Allocation = allocated(gpuClaim(""), "gpu-0").Status.Allocation
				if err := env.tracker.Reserve(c); err != nil {
					t.Fatal(err)
				}
			},
			unsignable: true,
		},
		"claim being deleted": {
			pod: other, objects: []runtime.Object{func() *resourceapi.ResourceClaim {
				c := otherClaim.DeepCopy()
				c.DeletionTimestamp = &metav1.Time{Time: time.Now()}
				return c
			}()},
			unsignable: true,
		},
		"pod group member": {
			pod: func() *v1.Pod {
				p := other.DeepCopy()
				minor.SetPodGroupName(p, "group")
				return p
			}(),
			objects: []runtime.Object{otherClaim}, unsignable: true,
		},
		"pod with a claim nomination": {
			pod: other, objects: []runtime.Object{otherClaim}, prepare: func(env *pluginEnv) {
				env.tracker.Nominations().Add(&tracker.Nomination{Pod: other.UID, Namespace: other.Namespace, Name: other.Name, Node: "node-a", Expires: time.Now().Add(time.Hour)})
			},
			unsignable: true,
		},
		"a slice for many nodes": {
			pod: other, objects: []runtime.Object{otherClaim, networkSlice}, unsignable: true,
		},
	} {
		if name == "pod group member" && !minor.PodGroupAPI {
			continue // 1.35's pods cannot name a PodGroup
		}
		t.Run(name, func(t *testing.T) {
			env := newPluginEnv(t, nil, append([]runtime.Object{localSlice}, tc.objects...)...)
			if tc.prepare != nil {
				tc.prepare(env)
			}
			got := signature(t, env, tc.pod)
			switch {
			case tc.unsignable && got != "":
				t.Errorf("signature %s, want none", got)
			case !tc.unsignable && got == "":
				t.Error("no signature")
			case tc.same && got != want:
				t.Errorf("signature differs from the same template's:\n%s", cmp.Diff(want, got))
			case !tc.unsignable && !tc.same && got == want:
				t.Errorf("signature %s equals the reference pod's", got)
			}
		})
	}
}

// Pods without claims have no fragment; with extended resources that
// devices may back, no signature.
func TestSignPodWithoutClaims(t *testing.T) {
	env := newPluginEnv(t, nil)
	if got := signature(t, env, builder.MakePod("plain").Obj()); got != "-" {
		t.Errorf("plain pod: signature %q, want no fragment", got)
	}
	if !env.plugin.fts.EnableDRAExtendedResource {
		t.Skip("DRAExtendedResource is off")
	}
	for name, pod := range map[string]*v1.Pod{
		"container":      builder.MakePod("extended").Containers(builder.Container("c", map[v1.ResourceName]string{"example.com/gpu": "1"})).Obj(),
		"init container": builder.MakePod("extended").InitContainers(builder.Container("init", map[v1.ResourceName]string{"example.com/gpu": "1"})).Obj(),
	} {
		if got := signature(t, env, pod); got != "" {
			t.Errorf("%s with an extended resource: signature %q, want none", name, got)
		}
	}
	native := builder.MakePod("native").Containers(builder.Container("c", map[v1.ResourceName]string{v1.ResourceCPU: "1", v1.ResourceMemory: "1Gi", "hugepages-2Mi": "2Mi"})).Obj()
	if got := signature(t, env, native); got != "-" {
		t.Errorf("pod with CPU, memory and hugepages: signature %q, want no fragment", got)
	}
}

// The count of slices for many nodes follows their creation, updates and
// deletion.
func TestNodeLocality(t *testing.T) {
	env := newPluginEnv(t, nil, builder.MakeSlice("local").Node("node-a").Obj())
	slices := env.client.ResourceV1().ResourceSlices()
	want := func(what string, local bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(env.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return env.plugin.nodeLocal.devices() == local, nil
		})
		if err != nil {
			t.Fatalf("%s: all devices local %v, want %v", what, !local, local)
		}
	}
	want("one local slice", true)
	fabric, err := slices.Create(env.ctx, builder.MakeSlice("fabric").AllNodes().Obj(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want("a slice for all nodes created", false)
	fabric.Spec.AllNodes, fabric.Spec.NodeName = nil, ptr.To("node-b")
	if _, err := slices.Update(env.ctx, fabric, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("that slice moved to one node", true)
	if _, err := slices.Create(env.ctx, builder.MakeSlice("fabric-2").AllNodes().Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("another slice for all nodes", false)
	if err := slices.Delete(env.ctx, "fabric-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("that slice deleted", true)
}
