package drapreemption

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"

	"github.com/drasched/drasched/apis/config"
	draschedv1 "github.com/drasched/drasched/apis/config/v1"
)

// handle is the part of the framework handle the plugin uses without the
// scheduler: the informers and the snapshot.
type handle struct {
	fwk.Handle
	factory  informers.SharedInformerFactory
	snapshot *cache.Snapshot
}

func (h *handle) SharedInformerFactory() informers.SharedInformerFactory { return h.factory }
func (h *handle) SnapshotSharedLister() fwk.SharedLister                 { return h.snapshot }

func newHandle(pods []*v1.Pod, nodes []*v1.Node) *handle {
	return &handle{
		factory:  informers.NewSharedInformerFactory(fake.NewClientset(), 0),
		snapshot: cache.NewSnapshot(pods, nodes),
	}
}

// New takes DefaultPreemptionArgs, or none (DefaultPreemption's defaults),
// and refuses other args and invalid values with a message that names the
// plugin.
func TestNew(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	fh := newHandle(nil, nil)
	for name, tc := range map[string]struct {
		args    *schedconfig.DefaultPreemptionArgs
		other   bool
		wantErr string
	}{
		"defaults":   {},
		"args":       {args: &schedconfig.DefaultPreemptionArgs{MinCandidateNodesPercentage: 20, MinCandidateNodesAbsolute: 50}},
		"bad values": {args: &schedconfig.DefaultPreemptionArgs{MinCandidateNodesPercentage: 200, MinCandidateNodesAbsolute: 50}, wantErr: "minCandidateNodesPercentage"},
		"other args": {other: true, wantErr: "want DefaultPreemptionArgs"},
	} {
		t.Run(name, func(t *testing.T) {
			var p fwk.Plugin
			var err error
			switch {
			case tc.other:
				p, err = New(ctx, &config.StructuredDRAArgs{}, fh)
			case tc.args != nil:
				p, err = New(ctx, tc.args, fh)
			default:
				p, err = New(ctx, nil, fh)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), Name) {
					t.Fatalf("error %v, want one naming %s and containing %q", err, Name, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != Name {
				t.Errorf("name %q, want %q", p.Name(), Name)
			}
		})
	}
}

// terminating returns a pod on node that preemption evicted deleted ago,
// with the given grace period.
func terminating(name, node string, deleted, grace time.Duration) *v1.Pod {
	at := metav1.NewTime(time.Now().Add(-deleted))
	seconds := int64(grace / time.Second)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), DeletionTimestamp: &at, DeletionGracePeriodSeconds: &seconds},
		Spec:       v1.PodSpec{NodeName: node},
		Status: v1.PodStatus{Conditions: []v1.PodCondition{{
			Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: v1.PodReasonPreemptionByScheduler,
		}}},
	}
}

func node(name string) *v1.Node { return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}} }

// The wait of a pod for the pods it preempted ends once the last of them
// has been terminating for longer than the nomination margin; pods
// deleted for other reasons are not waited for.
func TestPreemptedUntil(t *testing.T) {
	margin := draschedv1.DefaultNominationMargin
	for name, tc := range map[string]struct {
		pods  []*v1.Pod
		stuck bool
		none  bool
	}{
		"none terminating": {pods: []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "running", UID: "running"}, Spec: v1.PodSpec{NodeName: "node-a"}}}, none: true},
		"deleted, not by preemption": {pods: []*v1.Pod{func() *v1.Pod {
			p := terminating("deleted", "node-a", 2*margin, 0)
			p.Status.Conditions = nil
			return p
		}()}, none: true},
		"within the margin":      {pods: []*v1.Pod{terminating("victim", "node-a", margin/2, 0)}},
		"all past the margin":    {pods: []*v1.Pod{terminating("v1", "node-a", 2*margin, 0), terminating("v2", "node-a", 3*margin, 0)}, stuck: true},
		"past, then within":      {pods: []*v1.Pod{terminating("v1", "node-a", 2*margin, 0), terminating("v2", "node-a", margin/2, 0)}},
		"within, then past":      {pods: []*v1.Pod{terminating("v2", "node-a", margin/2, 0), terminating("v1", "node-a", 2*margin, 0)}},
		"on another node, stuck": {pods: []*v1.Pod{terminating("victim", "node-b", 2*margin, 0)}, none: true},
	} {
		t.Run(name, func(t *testing.T) {
			fh := newHandle(tc.pods, []*v1.Node{node("node-a"), node("node-b")})
			until := preemptedUntil(fh, margin, "node-a")
			switch {
			case tc.none:
				if !until.IsZero() {
					t.Fatalf("until %v, want none", until)
				}
			case until.IsZero():
				t.Fatal("no bound, want one")
			case tc.stuck != time.Now().After(until):
				t.Errorf("until %v: stuck %v, want %v", until, !tc.stuck, tc.stuck)
			}
		})
	}
}

// group is a pod group with unscheduled pods only.
type group struct {
	fwk.PodGroupInfo
	pods []*v1.Pod
}

func (g group) GetUnscheduledPods() []*v1.Pod { return g.pods }

// Pod-group preemption gets the group's pods without the nominations to
// nodes where all the pods they preempted are stuck, and with the others.
func TestWithoutStuckNominations(t *testing.T) {
	margin := draschedv1.DefaultNominationMargin
	fh := newHandle([]*v1.Pod{
		terminating("stuck", "node-a", 2*margin, 0),
		terminating("going", "node-b", margin/2, 0),
	}, []*v1.Node{node("node-a"), node("node-b"), node("node-c")})
	nominated := func(name, node string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name)}, Status: v1.PodStatus{NominatedNodeName: node}}
	}
	pods := []*v1.Pod{nominated("a", "node-a"), nominated("b", "node-b"), nominated("c", "node-c"), nominated("d", "")}
	in := group{pods: pods}
	out := withoutStuckNominations(fh, margin, in).GetUnscheduledPods()
	want := map[string]string{"a": "", "b": "node-b", "c": "node-c", "d": ""}
	for _, pod := range out {
		if pod.Status.NominatedNodeName != want[pod.Name] {
			t.Errorf("pod %s nominated to %q, want %q", pod.Name, pod.Status.NominatedNodeName, want[pod.Name])
		}
	}
	if pods[0].Status.NominatedNodeName != "node-a" {
		t.Error("the group's own pod was changed")
	}
	if got := withoutStuckNominations(fh, margin, group{pods: pods[1:]}); got.(group).pods[0] != pods[1] {
		t.Error("a group without stuck nominations was copied")
	}
}
