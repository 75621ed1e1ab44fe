package builder

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

// TestSlowSelector: the API server accepts SlowSelector (its estimated
// cost is within the limit, compiled as the API server compiles a new
// claim's selector), and an evaluation on a device with a negative
// attribute is false, with no error, at a runtime cost of most of the
// limit: the measure of its slowness that does not depend on the machine.
func TestSlowSelector(t *testing.T) {
	expr := SlowSelector("gpu.example.com", "index")
	if len(expr) > resourceapi.CELSelectorExpressionMaxLength {
		t.Fatalf("%d characters, more than the API server's %d", len(expr), resourceapi.CELSelectorExpressionMaxLength)
	}
	compiler := cel.GetCompiler(cel.Features{})
	envType := environment.NewExpressions
	validated := compiler.CompileCELExpression(expr, cel.Options{EnvType: &envType})
	if validated.Error != nil {
		t.Fatalf("the API server would refuse %s: %v", expr, validated.Error)
	}
	if validated.MaxCost > resourceapi.CELSelectorExpressionMaxCost {
		t.Fatalf("estimated cost %d, more than the API server's limit %d", validated.MaxCost, resourceapi.CELSelectorExpressionMaxCost)
	}

	// As the allocators compile it.
	compiled := compiler.CompileCELExpression(expr, cel.Options{DisableCostEstimation: true})
	device := func(index int64) cel.Device {
		return cel.Device{Driver: "gpu.example.com", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(index)}}}
	}
	match, details, err := compiled.DeviceMatches(context.Background(), device(-1))
	if err != nil || match {
		t.Fatalf("on a device with index -1: match %v, error %v; want no match, no error", match, err)
	}
	const minCost = resourceapi.CELSelectorExpressionMaxCost / 2
	if cost := details.ActualCost(); cost == nil || *cost < minCost {
		t.Errorf("runtime cost %v, want at least %d", cost, minCost)
	} else {
		t.Logf("estimated cost %d, runtime cost %d", validated.MaxCost, *cost)
	}
	if match, _, err := compiled.DeviceMatches(context.Background(), device(0)); err != nil || !match {
		t.Errorf("on a device with index 0: match %v, error %v; want a match", match, err)
	}
}
