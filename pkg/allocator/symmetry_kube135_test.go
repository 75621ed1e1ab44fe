//go:build kube1.35

package allocator

import resourceapi "k8s.io/api/resource/v1"

// listAttributes: 1.35's attributes have no lists.
func listAttributes() []*resourceapi.DeviceAttribute { return nil }
