package v1

import (
	"k8s.io/apimachinery/pkg/conversion"

	"github.com/drasched/drasched/apis/config"
)

// conversion-gen converts *metav1.Duration to metav1.Duration with
// apimachinery's helpers but cannot convert other optional fields into the
// internal types, which have no pointers. These functions do, with the same
// convention as apimachinery's: nil becomes the zero value, and a value
// becomes a pointer to it.

// Convert_Pointer_v1_AllocatorName_To_config_AllocatorName converts an
// optional allocator name.
func Convert_Pointer_v1_AllocatorName_To_config_AllocatorName(in **AllocatorName, out *config.AllocatorName, _ conversion.Scope) error {
	*out = fromPointer[AllocatorName, config.AllocatorName](*in)
	return nil
}

// Convert_config_AllocatorName_To_Pointer_v1_AllocatorName converts an
// allocator name into an optional one.
func Convert_config_AllocatorName_To_Pointer_v1_AllocatorName(in *config.AllocatorName, out **AllocatorName, _ conversion.Scope) error {
	*out = toPointer[config.AllocatorName, AllocatorName](*in)
	return nil
}

// Convert_Pointer_v1_DeviceScoringStrategy_To_config_DeviceScoringStrategy converts
// an optional strategy.
func Convert_Pointer_v1_DeviceScoringStrategy_To_config_DeviceScoringStrategy(in **DeviceScoringStrategy, out *config.DeviceScoringStrategy, _ conversion.Scope) error {
	*out = fromPointer[DeviceScoringStrategy, config.DeviceScoringStrategy](*in)
	return nil
}

// Convert_config_DeviceScoringStrategy_To_Pointer_v1_DeviceScoringStrategy converts
// a strategy into an optional one.
func Convert_config_DeviceScoringStrategy_To_Pointer_v1_DeviceScoringStrategy(in *config.DeviceScoringStrategy, out **DeviceScoringStrategy, _ conversion.Scope) error {
	*out = toPointer[config.DeviceScoringStrategy, DeviceScoringStrategy](*in)
	return nil
}

// Convert_Pointer_v1_ScoringArgs_To_config_ScoringArgs converts optional
// scoring settings.
func Convert_Pointer_v1_ScoringArgs_To_config_ScoringArgs(in **ScoringArgs, out *config.ScoringArgs, s conversion.Scope) error {
	if *in == nil {
		*out = config.ScoringArgs{}
		return nil
	}
	return Convert_v1_ScoringArgs_To_config_ScoringArgs(*in, out, s)
}

// Convert_config_ScoringArgs_To_Pointer_v1_ScoringArgs converts scoring
// settings into optional ones.
func Convert_config_ScoringArgs_To_Pointer_v1_ScoringArgs(in *config.ScoringArgs, out **ScoringArgs, s conversion.Scope) error {
	*out = new(ScoringArgs)
	return Convert_config_ScoringArgs_To_v1_ScoringArgs(in, *out, s)
}

// Convert_Pointer_v1_AllocationPolicy_To_config_AllocationPolicy converts an
// optional policy.
func Convert_Pointer_v1_AllocationPolicy_To_config_AllocationPolicy(in **AllocationPolicy, out *config.AllocationPolicy, _ conversion.Scope) error {
	*out = fromPointer[AllocationPolicy, config.AllocationPolicy](*in)
	return nil
}

// Convert_config_AllocationPolicy_To_Pointer_v1_AllocationPolicy converts a
// policy into an optional one.
func Convert_config_AllocationPolicy_To_Pointer_v1_AllocationPolicy(in *config.AllocationPolicy, out **AllocationPolicy, _ conversion.Scope) error {
	*out = toPointer[config.AllocationPolicy, AllocationPolicy](*in)
	return nil
}

// Convert_Pointer_v1_AllocationArgs_To_config_AllocationArgs converts
// optional allocation settings.
func Convert_Pointer_v1_AllocationArgs_To_config_AllocationArgs(in **AllocationArgs, out *config.AllocationArgs, s conversion.Scope) error {
	if *in == nil {
		*out = config.AllocationArgs{}
		return nil
	}
	return Convert_v1_AllocationArgs_To_config_AllocationArgs(*in, out, s)
}

// Convert_config_AllocationArgs_To_Pointer_v1_AllocationArgs converts
// allocation settings into optional ones.
func Convert_config_AllocationArgs_To_Pointer_v1_AllocationArgs(in *config.AllocationArgs, out **AllocationArgs, s conversion.Scope) error {
	*out = new(AllocationArgs)
	return Convert_config_AllocationArgs_To_v1_AllocationArgs(in, *out, s)
}

// Convert_Pointer_v1_PreemptionArgs_To_config_PreemptionArgs converts
// optional preemption settings.
func Convert_Pointer_v1_PreemptionArgs_To_config_PreemptionArgs(in **PreemptionArgs, out *config.PreemptionArgs, s conversion.Scope) error {
	if *in == nil {
		*out = config.PreemptionArgs{}
		return nil
	}
	return Convert_v1_PreemptionArgs_To_config_PreemptionArgs(*in, out, s)
}

// Convert_config_PreemptionArgs_To_Pointer_v1_PreemptionArgs converts
// preemption settings into optional ones.
func Convert_config_PreemptionArgs_To_Pointer_v1_PreemptionArgs(in *config.PreemptionArgs, out **PreemptionArgs, s conversion.Scope) error {
	*out = new(PreemptionArgs)
	return Convert_config_PreemptionArgs_To_v1_PreemptionArgs(in, *out, s)
}

func fromPointer[From, To ~string](in *From) To {
	if in == nil {
		return ""
	}
	return To(*in)
}

func toPointer[From, To ~string](in From) *To {
	out := To(in)
	return &out
}
