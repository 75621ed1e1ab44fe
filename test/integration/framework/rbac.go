package framework

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/drasched/drasched/internal/manifest"
)

// The scheduler's ServiceAccount, bound by config/scheduler/rbac.yaml.
const (
	schedulerNamespace      = "drasched-system"
	schedulerServiceAccount = "drasched-scheduler"
)

// schedulerConfig returns a copy of an admin config that impersonates the
// scheduler's ServiceAccount, so that the scheduler has exactly the
// permissions config/scheduler/rbac.yaml grants it. A rule missing there
// fails the test that needs it, as it would fail in a cluster.
func schedulerConfig(admin *rest.Config) *rest.Config {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + schedulerNamespace + ":" + schedulerServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + schedulerNamespace, "system:authenticated"},
	}
	return cfg
}

// SchedulerClientConfig returns the configuration for a scheduler that runs
// outside this process, such as the drasched binary, with the identity
// StartScheduler gives the in-process one: a copy of the admin config that
// impersonates the scheduler's ServiceAccount, once config/scheduler/rbac.yaml
// is applied and in force.
func SchedulerClientConfig(ctx context.Context, admin *rest.Config) (*rest.Config, error) {
	if err := ensureSchedulerRBAC(ctx, admin); err != nil {
		return nil, err
	}
	return schedulerConfig(admin), nil
}

// rbacApplied remembers, per apiserver, that config/scheduler/rbac.yaml was
// applied: its objects are cluster-wide or in fixed namespaces, so every
// scheduler started against the same apiserver shares them.
var rbacApplied struct {
	mutex sync.Mutex
	hosts map[string]bool
}

// ensureSchedulerRBAC applies config/scheduler/rbac.yaml with the admin
// config once per apiserver, and waits until the authorizer grants the
// scheduler's identity what it grants.
func ensureSchedulerRBAC(ctx context.Context, admin *rest.Config) error {
	rbacApplied.mutex.Lock()
	defer rbacApplied.mutex.Unlock()
	if rbacApplied.hosts[admin.Host] {
		return nil
	}
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return fmt.Errorf("create admin client: %w", err)
	}
	if err := applyRBAC(ctx, client, RepoFile("config", "scheduler", "rbac.yaml")); err != nil {
		return err
	}
	scheduler, err := kubernetes.NewForConfig(schedulerConfig(admin))
	if err != nil {
		return fmt.Errorf("create scheduler client: %w", err)
	}
	// RBAC objects reach the authorizer through its informers, a moment
	// after they are created.
	err = wait.PollUntilContextTimeout(ctx, pollInterval, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := scheduler.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("wait for the scheduler's permissions: %w", err)
	}
	if rbacApplied.hosts == nil {
		rbacApplied.hosts = map[string]bool{}
	}
	rbacApplied.hosts[admin.Host] = true
	return nil
}

// applyRBAC creates the RBAC objects of a manifest, and the namespaces of
// its namespaced ones; objects of other kinds are an error, so that a
// manifest that grows something else is not half applied.
func applyRBAC(ctx context.Context, client kubernetes.Interface, path string) error {
	objects, err := manifest.DecodeFile(path)
	if err != nil {
		return err
	}
	rbac := client.RbacV1()
	for _, obj := range objects {
		switch obj := obj.(type) {
		case *rbacv1.ClusterRole:
			_, err = rbac.ClusterRoles().Create(ctx, obj, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = rbac.ClusterRoleBindings().Create(ctx, obj, metav1.CreateOptions{})
		case *rbacv1.Role:
			if err = ensureNamespace(ctx, client, obj.Namespace); err == nil {
				_, err = rbac.Roles(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
			}
		case *rbacv1.RoleBinding:
			if err = ensureNamespace(ctx, client, obj.Namespace); err == nil {
				_, err = rbac.RoleBindings(obj.Namespace).Create(ctx, obj, metav1.CreateOptions{})
			}
		default:
			return fmt.Errorf("%s: unexpected %T", path, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("apply %s: %w", path, err)
		}
	}
	return nil
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
