package main

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/pkg/driver/gpu"
)

// The cluster's node kinds and the inventories their GPUs come from.
const (
	// kindH100: 8 H100 80GB on an HGX board, two per PCIe root. The fill and
	// churn workloads.
	kindH100 = "h100"
	// kindL40S: 8 L40S, four behind each of two PCIe switches. The match
	// workload: four GPUs on one PCIe root fit twice per node.
	kindL40S = "l40s"
	// kindA100: 8 A100 40GB, six in MIG mode. The mig workload.
	kindA100 = "a100"
)

// inventories by node kind, relative to the repository root.
var inventories = map[string]string{
	kindH100: "config/inventory/h100-hgx-8.yaml",
	kindL40S: "config/inventory/l40s-8-pcie-switch.yaml",
	kindA100: "config/inventory/a100-mig-8.yaml",
}

// Attribute values the workloads select devices by.
const (
	productH100 = "NVIDIA H100 80GB HBM3"
	productL40S = "NVIDIA L40S"
	// pcieRootAttribute is the standard attribute that the match workload
	// constrains.
	pcieRootAttribute = "resource.kubernetes.io/pcieRoot"
	// matchSize is how many GPUs a pod of the match workload takes on one
	// PCIe root.
	matchSize = 4
)

// nodeMix returns how many nodes of each kind a cluster of n nodes has: a
// tenth each of L40S and A100 nodes (at least one each from three nodes
// on), H100 nodes for the rest.
func nodeMix(n int) map[string]int {
	other := n / 10
	if other == 0 && n >= 3 {
		other = 1
	}
	return map[string]int{kindH100: n - 2*other, kindL40S: other, kindA100: other}
}

// nodeName names the i-th node of a kind.
func nodeName(kind string, i int) string { return fmt.Sprintf("%s-%04d", kind, i) }

// capacity is what the cluster offers to the workloads, counted in its
// ResourceSlices.
type capacity struct {
	// h100 is the number of H100 GPUs.
	h100 int
	// matchSlots is how many sets of matchSize L40S GPUs on one PCIe root
	// the nodes have.
	matchSlots int
	// mig is the number of MIG devices by profile.
	mig map[string]int
}

// capacityOf counts the devices of the GPU driver in the newest
// generation of each pool.
func capacityOf(all []resourceapi.ResourceSlice) capacity {
	c := capacity{mig: map[string]int{}}
	l40sPerRoot := map[[2]string]int{} // (pool, root) -> GPUs
	eachDevice(all, func(pool string, d *resourceapi.Device) {
		switch {
		case attribute(d, "type") == "mig":
			c.mig[attribute(d, "profile")]++
		case attribute(d, "type") == "gpu" && attribute(d, "productName") == productH100:
			c.h100++
		case attribute(d, "type") == "gpu" && attribute(d, "productName") == productL40S:
			l40sPerRoot[[2]string{pool, attribute(d, pcieRootAttribute)}]++
		}
	})
	for _, n := range l40sPerRoot {
		c.matchSlots += n / matchSize
	}
	return c
}

// podSpec is one pod of a workload: its name, the ResourceClaimTemplate
// of its claim and, if any, its PriorityClass and its PodGroup.
type podSpec struct {
	name string
	// template is the ResourceClaimTemplate of the pod's claim; a pod
	// without one has no claim (noclaims).
	template      string
	priorityClass string
	// gpus the pod's claim asks for, where a case counts them
	// (preempt, gang).
	gpus int
	// group is the PodGroup the pod belongs to (gang), if any.
	group string
}

// Templates of the workloads.
func h100Template(gpus int) string { return fmt.Sprintf("h100-%d", gpus) }

const matchTemplate = "l40s-4-one-pcie-root"

// migWholeTemplate asks for one whole GPU in MIG mode, the large pod of
// fragmentation_mig: it fits only on a GPU none of whose MIG devices is in
// use (see fragmentation.go).
const migWholeTemplate = "gpu-whole-mig-mode"

func migTemplate(profile string) string { return "mig-" + strings.ReplaceAll(profile, ".", "-") }

// fillSizes are the pod sizes of the fill workload, in GPUs.
var fillSizes = []int{8, 4, 2, 1}

// boundedFillPods are the pods of fillPods, but at most maxPods of them
// (none: 0): then of a fraction lowered in proportion, so that the mix of
// sizes stays, less the 1-GPU pods that rounding puts beyond maxPods. It
// returns the fraction of the GPUs that the pods take.
func boundedFillPods(prefix string, gpus int, fraction float64, maxPods int) ([]podSpec, float64) {
	pods := fillPods(prefix, gpus, fraction)
	if maxPods <= 0 || len(pods) <= maxPods {
		return pods, fraction
	}
	pods = fillPods(prefix, gpus, fraction*float64(maxPods)/float64(len(pods)))
	pods = pods[:min(len(pods), maxPods)]
	requested := 0
	for _, p := range pods {
		requested += p.gpus
	}
	return pods, float64(requested) / float64(gpus)
}

// withoutClaims returns the pods without their claims.
func withoutClaims(pods []podSpec) []podSpec {
	out := make([]podSpec, len(pods))
	for i, p := range pods {
		p.template = ""
		out[i] = p
	}
	return out
}

// fillPods returns pods of 8, 4, 2 and 1 H100 GPUs that together take
// fraction of gpus, each size about the same share of the GPUs (so many
// more small pods than large ones), 1-GPU pods making up the rest.
//
// They come largest first, in the order in which they are created. With
// sizes that are powers of two and largest first, any placement leaves
// every node's free GPUs a multiple of the next pod's size, so all pods
// fit whether a scheduler packs or spreads; in random order, a spreading
// scheduler strands the large pods and the case would measure placement
// policy instead of scheduling speed.
func fillPods(prefix string, gpus int, fraction float64) []podSpec {
	target := int(float64(gpus) * fraction)
	counts := map[int]int{}
	left := target
	for _, size := range fillSizes {
		counts[size] = target / len(fillSizes) / size
		left -= counts[size] * size
	}
	counts[1] += left
	var pods []podSpec
	for _, size := range fillSizes {
		for range counts[size] {
			pods = append(pods, podSpec{name: fmt.Sprintf("%s-%05d", prefix, len(pods)), template: h100Template(size), gpus: size})
		}
	}
	return pods
}

// matchPods returns fraction of the slots of four L40S GPUs on one PCIe
// root as pods.
func matchPods(slots int, fraction float64) []podSpec {
	var pods []podSpec
	for i := range int(float64(slots) * fraction) {
		pods = append(pods, podSpec{name: fmt.Sprintf("match-%05d", i), template: matchTemplate})
	}
	return pods
}

// migPods returns pods that take fraction of the MIG devices of each
// profile, one device each, the profiles interleaved.
func migPods(devices map[string]int, fraction float64) []podSpec {
	profiles := make([]string, 0, len(devices))
	want := map[string]int{}
	for p, n := range devices {
		profiles = append(profiles, p)
		want[p] = int(float64(n) * fraction)
	}
	slices.Sort(profiles)
	var pods []podSpec
	for made := map[string]int{}; ; {
		before := len(pods)
		for _, p := range profiles {
			if made[p] < want[p] {
				made[p]++
				pods = append(pods, podSpec{name: fmt.Sprintf("mig-%05d", len(pods)), template: migTemplate(p)})
			}
		}
		if len(pods) == before {
			return pods
		}
	}
}

// claimTemplates are the ResourceClaimTemplates of the workloads, for the
// MIG profiles given.
func claimTemplates(namespace string, migProfiles []string) []*resourceapi.ResourceClaimTemplate {
	attr := func(name string) string { return fmt.Sprintf("device.attributes[%q].%s", gpu.DefaultDriverName, name) }
	// A template without a selector asks for devices of the class by
	// count alone.
	template := func(name, class string, count int64, selector string, constraints []resourceapi.DeviceConstraint) *resourceapi.ResourceClaimTemplate {
		var selectors []resourceapi.DeviceSelector
		if selector != "" {
			selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: selector}}}
		}
		return &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{{
					Name: "gpus",
					Exactly: &resourceapi.ExactDeviceRequest{
						DeviceClassName: class,
						AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
						Count:           count,
						Selectors:       selectors,
					},
				}},
				Constraints: constraints,
			}}},
		}
	}
	var out []*resourceapi.ResourceClaimTemplate
	for _, size := range fillSizes {
		out = append(out, template(h100Template(size), gpuClass, int64(size), fmt.Sprintf("%s == %q", attr("productName"), productH100), nil))
	}
	out = append(out, template(matchTemplate, gpuClass, matchSize, fmt.Sprintf("%s == %q", attr("productName"), productL40S),
		[]resourceapi.DeviceConstraint{{Requests: []string{"gpus"}, MatchAttribute: ptr.To(resourceapi.FullyQualifiedName(pcieRootAttribute))}}))
	for _, p := range migProfiles {
		out = append(out, template(migTemplate(p), migClass, 1, fmt.Sprintf("%s == %q", attr("profile"), p), nil))
	}
	out = append(out, template(migWholeTemplate, gpuClass, 1, attr("migEnabled")+" == true", nil))
	// What Kueue counts against quota: no selector, no constraint. The
	// queue case's ResourceFlavor keeps its pods on H100 nodes.
	for _, shape := range queueShapes {
		out = append(out, template(queueTemplate(shape.gpus), gpuClass, int64(shape.gpus), "", nil))
	}
	return out
}

// DeviceClasses of the GPU driver (config/gpu-driver/deviceclasses.yaml).
const (
	gpuClass = "gpu.drasched.dev"
	migClass = "mig.gpu.drasched.dev"
)

// Labels of the benchmark's pods.
const (
	appLabel  = "app.kubernetes.io/name"
	appValue  = "drasched-kwok-bench"
	caseLabel = "drasched.dev/bench-case"
)

// podObject is the pod of a podSpec: one claim from its template, one
// container using it, for the scheduler schedulerName, with the podSpec's
// PriorityClass and PodGroup if it has them.
func podObject(namespace, schedulerName, caseName string, p podSpec) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      p.name,
			Namespace: namespace,
			Labels:    map[string]string{appLabel: appValue, caseLabel: caseName},
		},
		Spec: corev1.PodSpec{
			SchedulerName:                 schedulerName,
			PriorityClassName:             p.priorityClass,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers: []corev1.Container{{
				Name:  "cuda",
				Image: "registry.k8s.io/pause:3.10",
			}},
		},
	}
	if p.template != "" {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(p.template)}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	}
	if p.group != "" {
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(p.group)}
	}
	return pod
}
