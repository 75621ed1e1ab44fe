//go:build kube1.36

package randinst

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drasched/drasched/internal/minor"
)

// 1.36's API has none of these fields: the generator's draws stay the same,
// the object is left as it is.

func skipNodePrepare(*resourceapi.ResourceSlice) {}

func setCompatibilityGroups(*resourceapi.DeviceCounterConsumption, []string) {}

func setExactDerivedAttributes(*resourceapi.ExactDeviceRequest, []minor.DerivedAttribute) {}

func setSubRequestDerivedAttributes(*resourceapi.DeviceSubRequest, []minor.DerivedAttribute) {}
