package admission

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/internal/builder"
	"github.com/drasched/drasched/pkg/driver/gpu"
	"github.com/drasched/drasched/pkg/driver/gpu/discovery"
	"github.com/drasched/drasched/test/integration/framework"
)

// The GPU kubelet plugin's identity (config/gpu-driver) and the claim that
// a ServiceAccount token bound to a pod carries for the pod's node.
const (
	pluginUser     = "system:serviceaccount:drasched-system:gpu-kubelet-plugin"
	nodeNameClaim  = "authentication.kubernetes.io/node-name"
	gpuDriverName  = gpu.DefaultDriverName
	otherDriver    = "other.example.com"
	ownSlicePolicy = "may only write"
)

// TestOwnNodeSlices applies config/gpu-driver/rbac.yaml as shipped (the
// plugin's ClusterRole and the ValidatingAdmissionPolicy
// gpu-kubelet-plugin-own-node-slices) and writes ResourceSlices as the
// plugin on node A would: as its ServiceAccount, with the node claim of a
// token bound to its pod. It may create, update and delete the slices of
// its own node, driver and pool (the pool is named after the node, as
// pkg/driver/gpu publishes it); every write that touches another node's
// slices, another pool or another driver's slices is denied, on the new
// object and on the old one.
func TestOwnNodeSlices(t *testing.T) {
	env := framework.SetupWith(t, framework.SetupOptions{NoClaimController: true})
	applyFile(t, env.Ctx, env.Client, framework.RepoFile("config", "gpu-driver", "rbac.yaml"))
	nodeA, nodeB := env.Name("a"), env.Name("b")
	plugin := pluginClient(t, env, nodeA)

	slice := func(name, node, pool, driver string) *resourceapi.ResourceSlice {
		s := builder.MakeSlice(env.Name(name)).Driver(driver).Pool(pool, 1, 1).Node(node).
			Devices(builder.MakeDevice("gpu-0")).Obj()
		s.UID, s.ResourceVersion = "", ""
		return s
	}
	// create writes a slice and deletes it, as the admin, when the test
	// ends; a write that was denied leaves nothing to delete.
	create := func(t *testing.T, client kubernetes.Interface, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
		created, err := client.ResourceV1().ResourceSlices().Create(env.Ctx, s, metav1.CreateOptions{})
		t.Cleanup(func() {
			err := env.Client.ResourceV1().ResourceSlices().Delete(context.WithoutCancel(env.Ctx), s.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete ResourceSlice %s: %v", s.Name, err)
			}
		})
		return created, err
	}

	// RBAC and policies reach the authorizer and admission a moment after
	// they are created: wait until the plugin may write its own slice and
	// may not write another node's.
	env.WaitFor(framework.Timeout, "the plugin's RBAC and the own-node slice policy in force", func(ctx context.Context) (bool, string, error) {
		slices := plugin.ResourceV1().ResourceSlices()
		if _, err := slices.Create(ctx, slice("probe-own", nodeA, nodeA, gpuDriverName), dryRun); err != nil {
			return false, "own slice: " + err.Error(), nil
		}
		_, err := slices.Create(ctx, slice("probe-other", nodeB, nodeB, gpuDriverName), dryRun)
		if err == nil || !strings.Contains(err.Error(), ownSlicePolicy) {
			return false, "another node's slice: " + errString(err), nil
		}
		return true, "", nil
	})

	// Slices the plugin did not write: node B's, and another driver's on
	// node A.
	var others []*resourceapi.ResourceSlice
	for _, s := range []*resourceapi.ResourceSlice{
		slice("b", nodeB, nodeB, gpuDriverName),
		slice("a-other-driver", nodeA, nodeA, otherDriver),
	} {
		created, err := create(t, env.Client, s)
		if err != nil {
			t.Fatalf("create ResourceSlice %s as admin: %v", s.Name, err)
		}
		others = append(others, created)
	}
	sliceB, otherDriverSlice := others[0], others[1]

	t.Run("own slices", func(t *testing.T) {
		// What pkg/driver/gpu publishes for the node, with the names the
		// plugin's controller would let the API server generate.
		gpus, err := (&discovery.Inventory{Path: framework.RepoFile("config", "inventory", "l40s-4.yaml")}).Discover(env.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		published, err := gpu.BuildResourceSlices(gpu.SliceOptions{NodeName: nodeA}, gpus)
		if err != nil {
			t.Fatal(err)
		}
		if len(published) != 1 {
			t.Fatalf("%d slices for four GPUs, want 1", len(published))
		}
		own, err := create(t, plugin, published[0])
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		own.Spec.Pool.Generation++
		own.Spec.Devices = own.Spec.Devices[1:] // gpu-0 fell off the bus
		if _, err := plugin.ResourceV1().ResourceSlices().Update(env.Ctx, own, metav1.UpdateOptions{}); err != nil {
			t.Errorf("update: %v", err)
		}
		if err := plugin.ResourceV1().ResourceSlices().Delete(env.Ctx, own.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete: %v", err)
		}
	})

	denied := map[string]struct {
		write func(t *testing.T) error
		want  string
	}{
		"create another node's slice": {
			write: func(t *testing.T) error {
				_, err := create(t, plugin, slice("to-b", nodeB, nodeB, gpuDriverName))
				return err
			},
			want: "not those of node " + nodeB,
		},
		"create a slice in another node's pool, on its own node": {
			// A higher generation would make B's real slices look
			// obsolete.
			write: func(t *testing.T) error {
				s := slice("pool-b", nodeA, nodeB, gpuDriverName)
				s.Spec.Pool.Generation = 99
				_, err := create(t, plugin, s)
				return err
			},
			want: "not of pool " + nodeB,
		},
		"create a slice of another driver": {
			write: func(t *testing.T) error {
				_, err := create(t, plugin, slice("driver", nodeA, nodeA, otherDriver))
				return err
			},
			want: "not of driver " + otherDriver,
		},
		"create a slice for all nodes": {
			write: func(t *testing.T) error {
				s := slice("all-nodes", nodeA, nodeA, gpuDriverName)
				s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
				_, err := create(t, plugin, s)
				return err
			},
			want: "not slices without a node",
		},
		"create without the node claim": {
			write: func(t *testing.T) error {
				_, err := create(t, pluginClient(t, env, ""), slice("no-node", nodeA, nodeA, gpuDriverName))
				return err
			},
			want: "does not come from a pod bound to a node",
		},
		"update another node's slice": {
			write: func(*testing.T) error {
				s := sliceB.DeepCopy()
				s.Spec.Pool.Generation++
				_, err := plugin.ResourceV1().ResourceSlices().Update(env.Ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: "not those of node " + nodeB,
		},
		"update another node's slice into its own": {
			// The API server's validation refuses to change the node,
			// pool or driver of a slice before admission sees it; the
			// policy checks the old object too, should that ever change.
			write: func(*testing.T) error {
				s := sliceB.DeepCopy()
				s.Spec.NodeName, s.Spec.Pool.Name = &nodeA, nodeA
				_, err := plugin.ResourceV1().ResourceSlices().Update(env.Ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: "field is immutable",
		},
		"delete another node's slice": {
			write: func(*testing.T) error {
				return plugin.ResourceV1().ResourceSlices().Delete(env.Ctx, sliceB.Name, metav1.DeleteOptions{})
			},
			want: "not those of node " + nodeB,
		},
		"delete another driver's slice on its own node": {
			write: func(*testing.T) error {
				return plugin.ResourceV1().ResourceSlices().Delete(env.Ctx, otherDriverSlice.Name, metav1.DeleteOptions{})
			},
			want: "not of driver " + otherDriver,
		},
	}
	for name, tc := range denied {
		t.Run(name, func(t *testing.T) {
			err := tc.write(t)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}

	// What the plugin was denied is as the admin wrote it.
	for _, want := range others {
		got, err := env.Client.ResourceV1().ResourceSlices().Get(env.Ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("ResourceSlice %s: %v", want.Name, err)
			continue
		}
		if got.ResourceVersion != want.ResourceVersion {
			t.Errorf("ResourceSlice %s changed: resourceVersion %s, want %s", want.Name, got.ResourceVersion, want.ResourceVersion)
		}
	}
}

// pluginClient returns a client that acts as the GPU kubelet plugin's
// ServiceAccount, with the node claim of a token bound to its pod on node
// (none when node is empty), as the API server authenticates the plugin's
// projected token.
func pluginClient(t *testing.T, env *framework.Env, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: pluginUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:drasched-system", "system:authenticated"},
	}
	if node != "" {
		cfg.Impersonate.Extra = map[string][]string{nodeNameClaim: {node}}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func errString(err error) string {
	if err == nil {
		return "allowed"
	}
	return err.Error()
}
