package admission

import (
	"context"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
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
	// nodeLocalPolicy is the ValidatingAdmissionPolicy that keeps every
	// writer's slices of the GPU driver in their node's pool.
	nodeLocalPolicy = "drasched-node-local-slices"
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
		return makeSlice(env, name, node, pool, driver)
	}
	create := func(t *testing.T, client kubernetes.Interface, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
		return createSlice(t, env, client, s)
	}

	// RBAC and policies reach the authorizer and admission a moment after
	// they are created: wait until the plugin may write its own slice and
	// may not write another node's.
	env.WaitFor(framework.Timeout, "the plugin's RBAC and the own-node slice policy in force", func(ctx context.Context) (bool, string, error) {
		pluginSlices := plugin.ResourceV1().ResourceSlices()
		if _, err := pluginSlices.Create(ctx, slice("probe-own", nodeA, nodeA, gpuDriverName), dryRun); err != nil {
			return false, "own slice: " + err.Error(), nil
		}
		_, err := pluginSlices.Create(ctx, slice("probe-other", nodeB, nodeB, gpuDriverName), dryRun)
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
		// want: the error has one of these. Where the node-local slice
		// policy denies the write too, the API server may report either:
		// it names the first policy that denied, in no fixed order.
		want []string
	}{
		"create another node's slice": {
			write: func(t *testing.T) error {
				_, err := create(t, plugin, slice("to-b", nodeB, nodeB, gpuDriverName))
				return err
			},
			want: []string{"not those of node " + nodeB},
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
			want: []string{"not of pool " + nodeB, "not in pool " + nodeB},
		},
		"create a slice of another driver": {
			write: func(t *testing.T) error {
				_, err := create(t, plugin, slice("driver", nodeA, nodeA, otherDriver))
				return err
			},
			want: []string{"not of driver " + otherDriver},
		},
		"create a slice for all nodes": {
			write: func(t *testing.T) error {
				s := slice("all-nodes", nodeA, nodeA, gpuDriverName)
				s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
				_, err := create(t, plugin, s)
				return err
			},
			want: []string{"not slices without a node", "must name one node in spec.nodeName"},
		},
		"create without the node claim": {
			write: func(t *testing.T) error {
				_, err := create(t, pluginClient(t, env, ""), slice("no-node", nodeA, nodeA, gpuDriverName))
				return err
			},
			want: []string{"does not come from a pod bound to a node"},
		},
		"update another node's slice": {
			write: func(*testing.T) error {
				s := sliceB.DeepCopy()
				s.Spec.Pool.Generation++
				_, err := plugin.ResourceV1().ResourceSlices().Update(env.Ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: []string{"not those of node " + nodeB},
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
			want: []string{"field is immutable"},
		},
		"delete another node's slice": {
			write: func(*testing.T) error {
				return plugin.ResourceV1().ResourceSlices().Delete(env.Ctx, sliceB.Name, metav1.DeleteOptions{})
			},
			want: []string{"not those of node " + nodeB},
		},
		"delete another driver's slice on its own node": {
			write: func(*testing.T) error {
				return plugin.ResourceV1().ResourceSlices().Delete(env.Ctx, otherDriverSlice.Name, metav1.DeleteOptions{})
			},
			want: []string{"not of driver " + otherDriver},
		},
	}
	for name, tc := range denied {
		t.Run(name, func(t *testing.T) {
			err := tc.write(t)
			if err == nil || !slices.ContainsFunc(tc.want, func(want string) bool { return strings.Contains(err.Error(), want) }) {
				t.Errorf("error %v, want one with any of %q", err, tc.want)
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

// TestNodeLocalSlices applies config/gpu-driver/rbac.yaml as shipped and
// writes ResourceSlices of the GPU driver as node A's kubelet credentials
// (system:node:A: the Node authorizer and NodeRestriction let them write
// any slice that names node A, whatever its pool) and as a cluster admin.
// The policy drasched-node-local-slices holds for every writer: a slice of
// the driver names one node and is in that node's pool. A slice of pool B
// on node A would have pods on A allocated B's devices by name, block B's
// real devices, and with a higher generation make B's real slices look
// obsolete. Node A may still write its own pool's slices and other drivers'
// slices, and the kubelet's wipe on start deletes a slice that breaks the
// rule.
func TestNodeLocalSlices(t *testing.T) {
	env := framework.SetupWith(t, framework.SetupOptions{NoClaimController: true})
	nodeA, nodeB := env.Name("a"), env.Name("b")
	node := nodeClient(t, env, nodeA)
	adminSlices := env.Client.ResourceV1().ResourceSlices()

	// A slice of pool B on node A from before the policy, written once an
	// earlier test's copy of the policy is out of force.
	stale := makeSlice(env, "stale", nodeA, nodeB, gpuDriverName)
	env.WaitFor(framework.Timeout, "no node-local slice policy in force", func(ctx context.Context) (bool, string, error) {
		created, err := adminSlices.Create(ctx, stale, metav1.CreateOptions{})
		if err != nil {
			return false, "create ResourceSlice " + stale.Name + " as admin: " + err.Error(), nil
		}
		stale = created
		return true, "", nil
	})
	t.Cleanup(func() {
		err := adminSlices.Delete(context.WithoutCancel(env.Ctx), stale.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ResourceSlice %s: %v", stale.Name, err)
		}
	})

	applyFile(t, env.Ctx, env.Client, framework.RepoFile("config", "gpu-driver", "rbac.yaml"))
	env.WaitFor(framework.Timeout, "the node-local slice policy in force", func(ctx context.Context) (bool, string, error) {
		_, err := adminSlices.Create(ctx, makeSlice(env, "probe", nodeA, nodeB, gpuDriverName), dryRun)
		return err != nil && strings.Contains(err.Error(), nodeLocalPolicy), "a slice of pool B on node A: " + errString(err), nil
	})

	wrongPool := "must be in that node's pool " + nodeA + ", not in pool " + nodeB
	denied := map[string]struct {
		client kubernetes.Interface
		slice  *resourceapi.ResourceSlice
		want   string
	}{
		"node A: a slice of pool B on node A": {
			client: node,
			slice:  makeSlice(env, "node-pool-b", nodeA, nodeB, gpuDriverName),
			want:   wrongPool,
		},
		"node A: a slice of pool B on node A, higher generation": {
			client: node,
			slice: func() *resourceapi.ResourceSlice {
				s := makeSlice(env, "node-pool-b-gen", nodeA, nodeB, gpuDriverName)
				s.Spec.Pool.Generation = 99
				return s
			}(),
			want: wrongPool,
		},
		"node A: a slice of node B": {
			// NodeRestriction refuses this by itself; the policy adds
			// the pool to what it checks.
			client: node,
			slice:  makeSlice(env, "node-b", nodeB, nodeB, gpuDriverName),
			want:   "can only create ResourceSlice with the same NodeName as the requesting node",
		},
		"admin: a slice of pool B on node A": {
			// No writer is exempt: the driver never publishes such a
			// slice, and neither do the demo, the benchmarks or the tests.
			client: env.Client,
			slice:  makeSlice(env, "admin-pool-b", nodeA, nodeB, gpuDriverName),
			want:   wrongPool,
		},
		"admin: a slice for all nodes": {
			client: env.Client,
			slice: func() *resourceapi.ResourceSlice {
				s := makeSlice(env, "admin-all-nodes", nodeA, nodeA, gpuDriverName)
				s.Spec.NodeName, s.Spec.AllNodes = nil, ptr.To(true)
				return s
			}(),
			want: "must name one node in spec.nodeName",
		},
	}
	for name, tc := range denied {
		t.Run(name, func(t *testing.T) {
			_, err := createSlice(t, env, tc.client, tc.slice)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}

	t.Run("another driver", func(t *testing.T) {
		// Drivers not listed in the policy's nodeLocalDrivers may name
		// their pools as they like.
		for name, client := range map[string]kubernetes.Interface{"node": node, "admin": env.Client} {
			s := makeSlice(env, name+"-other-driver", nodeA, nodeB, otherDriver)
			if _, err := createSlice(t, env, client, s); err != nil {
				t.Errorf("%s: create a slice of pool %s on node %s of driver %s: %v", name, nodeB, nodeA, otherDriver, err)
			}
		}
	})

	t.Run("update the slice from before the policy", func(t *testing.T) {
		s := stale.DeepCopy()
		s.Spec.Pool.Generation++
		_, err := adminSlices.Update(env.Ctx, s, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), wrongPool) {
			t.Errorf("error %v, want one with %q", err, wrongPool)
		}
	})

	t.Run("own pool", func(t *testing.T) {
		own, err := createSlice(t, env, node, makeSlice(env, "own", nodeA, nodeA, gpuDriverName))
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		// The Node authorizer lets a node update and delete the slices it
		// knows from its informer to be the node's: a moment after the
		// create.
		env.WaitFor(framework.Timeout, "node A to see its slice", func(ctx context.Context) (bool, string, error) {
			_, err := node.ResourceV1().ResourceSlices().Get(ctx, own.Name, metav1.GetOptions{})
			return err == nil, "get as node A: " + errString(err), nil
		})
		own.Spec.Pool.Generation++
		if _, err := node.ResourceV1().ResourceSlices().Update(env.Ctx, own, metav1.UpdateOptions{}); err != nil {
			t.Errorf("update: %v", err)
		}
		if err := node.ResourceV1().ResourceSlices().Delete(env.Ctx, own.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete: %v", err)
		}
	})

	t.Run("kubelet wipes its node's slices", func(t *testing.T) {
		// As the kubelet does on start for a driver (DeleteCollection by
		// node and driver): the slice from before the policy goes too.
		selector := fields.Set{resourceapi.ResourceSliceSelectorNodeName: nodeA, resourceapi.ResourceSliceSelectorDriver: gpuDriverName}.String()
		err := node.ResourceV1().ResourceSlices().DeleteCollection(env.Ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			t.Fatalf("delete the slices of node %s: %v", nodeA, err)
		}
		if _, err := adminSlices.Get(env.Ctx, stale.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ResourceSlice %s after the wipe: %v, want not found", stale.Name, errString(err))
		}
	})
}

// nodeClient returns a client that acts as the kubelet of node: the user
// system:node:<node> in the group system:nodes, as the Node authorizer and
// NodeRestriction recognise a node's credentials.
func nodeClient(t *testing.T, env *framework.Env, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:node:" + node,
		Groups:   []string{"system:nodes", "system:authenticated"},
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// makeSlice returns a ResourceSlice named env.Name(name) with one device,
// gpu-0, ready to create.
func makeSlice(env *framework.Env, name, node, pool, driver string) *resourceapi.ResourceSlice {
	s := builder.MakeSlice(env.Name(name)).Driver(driver).Pool(pool, 1, 1).Node(node).
		Devices(builder.MakeDevice("gpu-0")).Obj()
	s.UID, s.ResourceVersion = "", ""
	return s
}

// createSlice writes a slice with client and deletes it, as the admin, when
// the test ends; a write that was denied leaves nothing to delete.
func createSlice(t *testing.T, env *framework.Env, client kubernetes.Interface, s *resourceapi.ResourceSlice) (*resourceapi.ResourceSlice, error) {
	t.Helper()
	created, err := client.ResourceV1().ResourceSlices().Create(env.Ctx, s, metav1.CreateOptions{})
	t.Cleanup(func() {
		err := env.Client.ResourceV1().ResourceSlices().Delete(context.WithoutCancel(env.Ctx), s.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete ResourceSlice %s: %v", s.Name, err)
		}
	})
	return created, err
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
