package core

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/drasched/drasched/internal/minor"
)

// Features are the allocator features that kube-scheduler derives from
// gate: upstream's dynamicresources.AllocatorFeatures of the scheduler's
// feature set, of the minor this build is for.
func Features(gate featuregate.FeatureGate) structured.Features {
	return minor.AllocatorFeatures(gate)
}

// DefaultFeatures are the allocator features of this binary's feature
// gates (the process-wide gate that --feature-gates sets): with no flag,
// kube-scheduler's defaults of the Kubernetes minor drasched is built on.
func DefaultFeatures() structured.Features {
	return Features(utilfeature.DefaultFeatureGate)
}
