package drapreemption

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	testingclock "k8s.io/utils/clock/testing"

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

// activations records the pods a handle was asked to activate.
type activations struct {
	*handle
	mu   sync.Mutex
	pods []string
}

func (a *activations) Activate(_ klog.Logger, pods map[string]*v1.Pod) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key := range pods {
		a.pods = append(a.pods, key)
	}
}

func (a *activations) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.pods)
}

// A pod told that it waits for stuck victims until a time is retried at
// that time, once however often it was told, and not after the scheduler
// stopped; a wait moved to another time is retried then instead.
func TestRetryAtEndOfWait(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	pod := func(name string) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)}}
	}
	start := time.Now()
	for name, tc := range map[string]struct {
		// at are the ends of the waits the pods are told, in order.
		at []struct {
			pod   string
			after time.Duration
		}
		stop bool
		// steps are how far the clock is stepped, and the activations
		// wanted after each.
		steps []time.Duration
		want  [][]string
	}{
		"retried at the end": {
			at: []struct {
				pod   string
				after time.Duration
			}{{"a", 3 * time.Second}},
			steps: []time.Duration{3*time.Second - time.Millisecond, time.Millisecond, time.Minute},
			want:  [][]string{nil, {"default/a"}, {"default/a"}},
		},
		"told twice, retried once": {
			at: []struct {
				pod   string
				after time.Duration
			}{{"a", time.Second}, {"a", time.Second}},
			steps: []time.Duration{time.Second, time.Minute},
			want:  [][]string{{"default/a"}, {"default/a"}},
		},
		"wait moved": {
			at: []struct {
				pod   string
				after time.Duration
			}{{"a", time.Second}, {"a", 5 * time.Second}},
			steps: []time.Duration{time.Second, 4 * time.Second},
			want:  [][]string{nil, {"default/a"}},
		},
		"two pods": {
			at: []struct {
				pod   string
				after time.Duration
			}{{"a", 2 * time.Second}, {"b", time.Second}},
			steps: []time.Duration{time.Second, time.Second},
			want:  [][]string{{"default/b"}, {"default/b", "default/a"}},
		},
		"scheduler stopped": {
			at: []struct {
				pod   string
				after time.Duration
			}{{"a", time.Second}},
			stop:  true,
			steps: []time.Duration{time.Minute},
			want:  [][]string{nil},
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(start)
			fh := &activations{handle: newHandle(nil, nil)}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			r := newRetries(ctx, fh, clk)
			for _, at := range tc.at {
				r.at(logger, pod(at.pod), start.Add(at.after))
			}
			if tc.stop {
				cancel()
				// context.AfterFunc runs in its own goroutine.
				for r.pending() > 0 {
					runtime.Gosched()
				}
			}
			for i, step := range tc.steps {
				clk.Step(step)
				if got := fh.got(); !slices.Equal(got, tc.want[i]) {
					t.Errorf("after step %d (%s): activated %v, want %v", i, step, got, tc.want[i])
				}
			}
		})
	}
}
