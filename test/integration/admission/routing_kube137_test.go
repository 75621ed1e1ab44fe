//go:build !kube1.35

package admission

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/test/integration/framework"
)

// TestRouting applies config/admission as shipped (`kubectl apply -k
// config/admission`) and checks what it does to the pods created after it
// is in force. Pods with claims or with extended resources backed by a
// DeviceClass that the default scheduler would schedule go to drasched,
// which binds them; such pods that name another scheduler, try to opt out
// with a label on the pod, or come bound (whichever scheduler they name)
// are refused; pods without claims are left as they are. In a namespace a
// cluster admin exempted, both policies leave pods alone.
func TestRouting(t *testing.T) {
	env := framework.Setup(t)
	applyAdmission(t, env, "routing.yaml", "scheduler-required.yaml")

	nodes := env.CreateNodes(1)
	env.PublishSlices(env.NodeSlice(nodes[0], builder.Devices("gpu", 8, nil)...).Obj())
	class := env.CreateClass("gpu")
	env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))
	env.StartScheduler(framework.SchedulerOptions{})
	classResource := map[v1.ResourceName]string{v1.ResourceName("deviceclass.resource.kubernetes.io/" + class): "1"}

	// No default scheduler runs: a pod the policies leave alone stays
	// pending, a routed one is bound by drasched.
	tests := map[string]admissionCase{
		"claim template": {
			pod:           makePod("template").ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"claim template, default-scheduler named": {
			pod:           makePod("named-default").SchedulerName(v1.DefaultSchedulerName).ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"claim template, drasched named": {
			pod:           makePod("named-drasched").SchedulerName(framework.SchedulerName).ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"extended resource backed by a DeviceClass": {
			pod:           makePod("extended").Containers(builder.Container("app", classResource)),
			wantScheduler: framework.SchedulerName,
		},
		"opt-out label on the pod": {
			// Anyone who may create a pod may label it: the label
			// does nothing on a pod.
			pod:           makePod("pod-label").Label(exemptLabel, "disabled").ClaimFromTemplate("gpu", "one-gpu"),
			wantScheduler: framework.SchedulerName,
		},
		"no claims": {
			pod:           makePod("no-claims"),
			wantScheduler: v1.DefaultSchedulerName,
		},
		"no claims, another scheduler": {
			pod:           makePod("no-claims-other").SchedulerName("other-scheduler"),
			wantScheduler: "other-scheduler",
		},
		// The routes around drasched.
		"claim template, another scheduler": {
			pod: makePod("other").SchedulerName("other-scheduler").ClaimFromTemplate("gpu", "one-gpu"),
		},
		"claim template, another scheduler, opt-out label on the pod": {
			pod: makePod("other-pod-label").SchedulerName("other-scheduler").Label(exemptLabel, "disabled").ClaimFromTemplate("gpu", "one-gpu"),
		},
		"extended resource, another scheduler": {
			pod: makePod("extended-other").SchedulerName("other-scheduler").Containers(builder.Container("app", classResource)),
		},
		"extended resource in an init container, another scheduler": {
			pod: makePod("init-other").SchedulerName("other-scheduler").InitContainers(builder.Container("init", classResource)),
		},
		"claim template, bound at creation": {
			// The routing leaves bound pods alone; bound, the pod is
			// the default scheduler's.
			pod: func() *builder.PodWrapper {
				pod := makePod("bound").ClaimFromTemplate("gpu", "one-gpu")
				pod.Spec.NodeName = nodes[0].Name
				return pod
			}(),
			dryRun: true,
		},
		"claim template, drasched named, bound at creation": {
			// No scheduler sees a bound pod, and the claim controller
			// reserves its claim as it is.
			pod:         makePod("bound-drasched").SchedulerName(framework.SchedulerName).Node(nodes[0].Name).ClaimFromTemplate("gpu", "one-gpu"),
			dryRun:      true,
			wantMessage: boundMessage,
		},
		"no claims, bound at creation": {
			pod: func() *builder.PodWrapper {
				pod := makePod("bound-no-claims")
				pod.Spec.NodeName = nodes[0].Name
				return pod
			}(),
			dryRun:        true,
			wantScheduler: v1.DefaultSchedulerName,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			env := env.Sub(t)
			pod := checkAdmission(t, env, tc)
			if pod == nil || tc.wantScheduler != framework.SchedulerName {
				return
			}
			bound := env.WaitForPodScheduled(pod.Name)
			if bound.Spec.NodeName != nodes[0].Name {
				t.Errorf("pod bound to %q, want %s", bound.Spec.NodeName, nodes[0].Name)
			}
			waitScheduledBy(t, env, pod.Name, framework.SchedulerName)
		})
	}
	env.WaitForConsistentAllocations()

	t.Run("exempt namespace", func(t *testing.T) {
		env := framework.Setup(t)
		env.CreateTemplate(builder.MakeTemplate("one-gpu", builder.MakeClaim("").Request("gpu", class, 1)))
		exemptNamespace(env)
		for name, tc := range map[string]admissionCase{
			"claim template": {
				pod:           makePod("template").ClaimFromTemplate("gpu", "one-gpu"),
				wantScheduler: v1.DefaultSchedulerName,
			},
			"claim template, another scheduler": {
				pod:           makePod("other").SchedulerName("other-scheduler").ClaimFromTemplate("gpu", "one-gpu"),
				wantScheduler: "other-scheduler",
			},
			"extended resource, another scheduler": {
				pod:           makePod("extended-other").SchedulerName("other-scheduler").Containers(builder.Container("app", classResource)),
				wantScheduler: "other-scheduler",
			},
			"claim template, drasched named, bound at creation": {
				pod:           makePod("bound-drasched").SchedulerName(framework.SchedulerName).Node(nodes[0].Name).ClaimFromTemplate("gpu", "one-gpu"),
				dryRun:        true,
				wantScheduler: framework.SchedulerName,
			},
		} {
			t.Run(name, func(t *testing.T) { checkAdmission(t, env.Sub(t), tc) })
		}
	})
}
