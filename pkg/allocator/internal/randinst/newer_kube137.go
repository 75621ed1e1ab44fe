//go:build !kube1.35 && !kube1.36

package randinst

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drasched/drasched/internal/minor"
)

// The fields of 1.37's API that older minors lack; in an older minor's
// build (newer_kube136.go) these leave the object as it is.

func skipNodePrepare(s *resourceapi.ResourceSlice) {
	s.Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationNodePrepareResources}
}

func setCompatibilityGroups(c *resourceapi.DeviceCounterConsumption, groups []string) {
	c.CompatibilityGroups = groups
}

func setExactDerivedAttributes(r *resourceapi.ExactDeviceRequest, attrs []minor.DerivedAttribute) {
	r.DerivedAttributes = attrs
}

func setSubRequestDerivedAttributes(r *resourceapi.DeviceSubRequest, attrs []minor.DerivedAttribute) {
	r.DerivedAttributes = attrs
}
