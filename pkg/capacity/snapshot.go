package capacity

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"

	"github.com/drasched/drasched/internal/minor"
)

// Snapshot is the cluster state that Top, fit and explain work on: one
// reader, so that the three agree on what they see.
type Snapshot struct {
	Nodes []*v1.Node
	// Slices have the taints of DeviceTaintRules added to their devices,
	// as the scheduler and the ResourcePoolStatusRequest controller see
	// them.
	Slices  []*resourceapi.ResourceSlice
	Claims  []*resourceapi.ResourceClaim
	Classes []*resourceapi.DeviceClass
	// Pods are read only with ReadOptions.Pods (fit and explain need them).
	Pods []*v1.Pod
	// Notes say what could not be read and was left out.
	Notes []string
}

// ReadOptions say what Read reads besides devices, claims and classes.
type ReadOptions struct {
	// Pods: read every pod, for the resources they request on their nodes.
	Pods bool
	// Timeout bounds the wait for DeviceTaintRules to be applied; zero
	// means a minute.
	Timeout time.Duration
}

// Read lists what Top, fit and explain need: nodes, ResourceSlices with
// DeviceTaintRules applied (by the library kube-scheduler applies them
// with, k8s.io/dynamic-resource-allocation/resourceslice/tracker),
// ResourceClaims, DeviceClasses and, on request, pods. A refused read of
// anything but DeviceTaintRules is an error that names the resource and
// wraps the API's (apierrors.IsForbidden); DeviceTaintRules that cannot be
// read are left out with a note.
func Read(ctx context.Context, client kubernetes.Interface, opts ReadOptions) (*Snapshot, error) {
	s := &Snapshot{}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, readError("nodes", "", err)
	}
	for i := range nodes.Items {
		s.Nodes = append(s.Nodes, &nodes.Items[i])
	}
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, readError("resourceclaims", "resource.k8s.io", err)
	}
	for i := range claims.Items {
		s.Claims = append(s.Claims, &claims.Items[i])
	}
	classes, err := client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, readError("deviceclasses", "resource.k8s.io", err)
	}
	for i := range classes.Items {
		s.Classes = append(s.Classes, &classes.Items[i])
	}
	if opts.Pods {
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, readError("pods", "", err)
		}
		for i := range pods.Items {
			s.Pods = append(s.Pods, &pods.Items[i])
		}
	}
	if s.Slices, err = readSlices(ctx, client, opts, &s.Notes); err != nil {
		return nil, err
	}
	return s, nil
}

// readSlices lists the ResourceSlices, with DeviceTaintRules applied where
// they can be read and there are any.
func readSlices(ctx context.Context, client kubernetes.Interface, opts ReadOptions, notes *[]string) ([]*resourceapi.ResourceSlice, error) {
	// The tracker's informer would retry a refused list forever: ask once.
	rules, err := minor.ListDeviceTaintRules(ctx, client)
	switch {
	case err == nil && rules == 0:
		// Nothing to apply: one list is enough.
		return listSlices(ctx, client)
	case err == nil:
	case apierrors.IsForbidden(err) || apierrors.IsNotFound(err):
		*notes = append(*notes, fmt.Sprintf("DeviceTaintRules not applied (%v): devices tainted only by a rule count as available", err))
		return listSlices(ctx, client)
	default:
		return nil, readError("devicetaintrules", "resource.k8s.io", err)
	}
	if _, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, readError("resourceslices", "resource.k8s.io", err)
	}

	timeout := opts.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	factory := informers.NewSharedInformerFactory(client, 0)
	// Shutdown waits for the informers, which stop when ctx ends.
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	t, err := tracker.StartTracker(ctx, minor.TaintTrackerOptions(factory))
	if err != nil {
		return nil, fmt.Errorf("apply DeviceTaintRules: %w", err)
	}
	defer t.Stop()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), t.HasSynced) {
		return nil, fmt.Errorf("read resourceslices and devicetaintrules: %w", context.Cause(ctx))
	}
	slices, err := t.ListPatchedResourceSlices()
	if err != nil {
		return nil, fmt.Errorf("apply DeviceTaintRules: %w", err)
	}
	return slices, nil
}

func listSlices(ctx context.Context, client kubernetes.Interface) ([]*resourceapi.ResourceSlice, error) {
	list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, readError("resourceslices", "resource.k8s.io", err)
	}
	slices := make([]*resourceapi.ResourceSlice, len(list.Items))
	for i := range list.Items {
		slices[i] = &list.Items[i]
	}
	return slices, nil
}

// readError says which list failed; a refusal says which permission is
// missing.
func readError(resource, group string, err error) error {
	name := resource
	if group != "" {
		name += "." + group
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("list %s: %w (kubectl drasched needs get, list and watch on nodes, pods, resourceclaims, resourceslices, devicetaintrules and deviceclasses)", name, err)
	}
	return fmt.Errorf("list %s: %w", name, err)
}
