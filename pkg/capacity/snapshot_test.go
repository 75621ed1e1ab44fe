package capacity_test

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/capacity"
)

// forbid makes the client refuse to list a resource.
func forbid(client *fake.Clientset, resource string) {
	client.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: resource}, "", nil)
	})
}

// TestReadForbidden: a refused list of claims or slices is an error that
// says which permission is missing; refused DeviceTaintRules leave a note.
func TestReadForbidden(t *testing.T) {
	for _, resource := range []string{"resourceclaims", "resourceslices", "deviceclasses", "nodes"} {
		t.Run(resource, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := fake.NewClientset()
			forbid(client, resource)
			_, err := capacity.Read(ctx, client, capacity.ReadOptions{})
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "list "+resource) || !strings.Contains(err.Error(), "kubectl drasched needs") {
				t.Errorf("got %v, want a forbidden error naming %s and the permissions", err, resource)
			}
		})
	}
	t.Run("devicetaintrules", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		client := fake.NewClientset(builder.MakeSlice("s").Node("n").Devices(builder.MakeDevice("gpu-0")).Obj())
		forbid(client, "devicetaintrules")
		snap, err := capacity.Read(ctx, client, capacity.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(snap.Slices) != 1 || len(snap.Notes) != 1 || !strings.Contains(snap.Notes[0], "DeviceTaintRules not applied") {
			t.Errorf("got %d slices and notes %q, want the slice and a note", len(snap.Slices), snap.Notes)
		}
	})
}
