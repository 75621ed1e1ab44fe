// Package validation validates the StructuredDRA plugin's arguments.
package validation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/drasched/drasched/apis/config"
)

var (
	supportedAllocators = []config.AllocatorName{
		config.AllocatorBuiltin,
		config.AllocatorUpstream,
	}
	supportedAllocationPolicies = []config.AllocationPolicy{
		config.AllocationPolicyFirstFit,
		config.AllocationPolicyBestFit,
	}
	supportedDeviceScoringStrategies = []config.DeviceScoringStrategy{
		config.DeviceScoringMostAllocated,
		config.DeviceScoringLeastAllocated,
		config.DeviceScoringNone,
	}
)

// ValidateStructuredDRAArgs validates defaulted StructuredDRAArgs. Errors name
// the field below path (for example "filterTimeout" with a nil path, or
// "profiles[0].pluginConfig[1].args.filterTimeout"); the timeouts follow the
// rules and wording of the in-tree DynamicResourcesArgs. It returns nil or
// an aggregate of field errors.
func ValidateStructuredDRAArgs(path *field.Path, args *config.StructuredDRAArgs) error {
	var allErrs field.ErrorList
	if args.FilterTimeout.Duration < 0 {
		allErrs = append(allErrs, field.Invalid(path.Child("filterTimeout"), args.FilterTimeout, "must be zero or positive"))
	}
	if args.BindingTimeout.Duration < time.Second {
		allErrs = append(allErrs, field.Invalid(path.Child("bindingTimeout"), args.BindingTimeout, "must be at least 1 second"))
	}
	if !slices.Contains(supportedAllocators, args.Allocator) {
		allErrs = append(allErrs, field.NotSupported(path.Child("allocator"), string(args.Allocator), supportedAllocators))
	}
	if !slices.Contains(supportedDeviceScoringStrategies, args.Scoring.DeviceStrategy) {
		allErrs = append(allErrs, field.NotSupported(path.Child("scoring", "deviceStrategy"), string(args.Scoring.DeviceStrategy), supportedDeviceScoringStrategies))
	}
	allErrs = append(allErrs, validateAllocation(path.Child("allocation"), args)...)
	if args.Preemption.NominationMargin.Duration < 0 {
		allErrs = append(allErrs, field.Invalid(path.Child("preemption", "nominationMargin"), args.Preemption.NominationMargin, "must be zero or positive"))
	}
	return allErrs.ToAggregate()
}

// maxTopologyAttributes bounds the topology levels BestFit sorts by: each
// adds a key per device and a group count per node.
const maxTopologyAttributes = 8

func validateAllocation(path *field.Path, args *config.StructuredDRAArgs) field.ErrorList {
	var allErrs field.ErrorList
	a := args.Allocation
	switch {
	case !slices.Contains(supportedAllocationPolicies, a.Policy):
		allErrs = append(allErrs, field.NotSupported(path.Child("policy"), string(a.Policy), supportedAllocationPolicies))
	case a.Policy != config.AllocationPolicyFirstFit && args.Allocator == config.AllocatorUpstream:
		allErrs = append(allErrs, field.Invalid(path.Child("policy"), string(a.Policy), `needs allocator "builtin": the upstream allocator only has FirstFit`))
	}
	attrs := path.Child("topologyAttributes")
	if len(a.TopologyAttributes) > maxTopologyAttributes {
		allErrs = append(allErrs, field.TooMany(attrs, len(a.TopologyAttributes), maxTopologyAttributes))
	}
	seen := map[resourceapi.FullyQualifiedName]bool{}
	for i, name := range a.TopologyAttributes {
		p := attrs.Index(i)
		if seen[name] {
			allErrs = append(allErrs, field.Duplicate(p, name))
			continue
		}
		seen[name] = true
		domain, id, ok := strings.Cut(string(name), "/")
		if !ok {
			allErrs = append(allErrs, field.Invalid(p, name, "must be fully qualified, <domain>/<name>, e.g. resource.kubernetes.io/pcieRoot"))
			continue
		}
		for _, msg := range utilvalidation.IsDNS1123Subdomain(domain) {
			allErrs = append(allErrs, field.Invalid(p, name, "domain: "+msg))
		}
		if len(domain) > resourceapi.DeviceMaxDomainLength {
			allErrs = append(allErrs, field.Invalid(p, name, fmt.Sprintf("domain: must be no more than %d characters", resourceapi.DeviceMaxDomainLength)))
		}
		for _, msg := range utilvalidation.IsCIdentifier(id) {
			allErrs = append(allErrs, field.Invalid(p, name, "name: "+msg))
		}
		if len(id) > resourceapi.DeviceMaxIDLength {
			allErrs = append(allErrs, field.Invalid(p, name, fmt.Sprintf("name: must be no more than %d characters", resourceapi.DeviceMaxIDLength)))
		}
	}
	return allErrs
}
