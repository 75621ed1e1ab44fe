//go:build kube1.35 || kube1.36

package randinst

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/drasched/drasched/internal/minor"
)

// The API of 1.35 and 1.36 has none of these fields: the generator's draws stay the same,
// the object is left as it is.

func skipNodePrepare(*resourceapi.ResourceSlice) {}

func setCompatibilityGroups(*resourceapi.DeviceCounterConsumption, []string) {}

func setExactDerivedAttributes(*resourceapi.ExactDeviceRequest, []minor.DerivedAttribute) {}

func setSubRequestDerivedAttributes(*resourceapi.DeviceSubRequest, []minor.DerivedAttribute) {}
