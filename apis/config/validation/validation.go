// Package validation validates the StructuredDRA plugin's arguments.
package validation

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/drasched/drasched/apis/config"
)

var (
	supportedAllocators = []config.AllocatorName{
		config.AllocatorBuiltin,
		config.AllocatorUpstream,
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
	return allErrs.ToAggregate()
}
