//go:build kube1.35

package capacity

import (
	"context"
	"fmt"

	"k8s.io/client-go/kubernetes"

	"github.com/drasched/drasched/internal/minor"
)

// PoolStatusesFromAPI: Kubernetes 1.35 has no ResourcePoolStatusRequest
// (it is 1.36's), so there is no answer to compare with.
func PoolStatusesFromAPI(context.Context, kubernetes.Interface, []string, APIOptions) ([]minor.PoolStatus, []string, error) {
	return nil, nil, fmt.Errorf("%w: Kubernetes %s has no ResourcePoolStatusRequest API (1.36 and later); this kubectl-drasched is built for %s", ErrNotServed, minor.Minor, minor.Minor)
}
