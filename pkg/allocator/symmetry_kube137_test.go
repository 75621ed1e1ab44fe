//go:build !kube1.35

package allocator

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// listAttributes are attributes with list values (1.36 and later), each
// different from the others.
func listAttributes() []*resourceapi.DeviceAttribute {
	return []*resourceapi.DeviceAttribute{
		{StringValue: ptr.To("x"), IntValues: []int64{1}},
		{IntValues: []int64{1, 2}},
		{IntValues: []int64{12}},
		{BoolValues: []bool{true}},
		{StringValues: []string{"ab", "c"}},
		{StringValues: []string{"a", "bc"}},
		{VersionValues: []string{"ab", "c"}},
	}
}
