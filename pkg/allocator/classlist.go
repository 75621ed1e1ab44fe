package allocator

import (
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/dynamic-resource-allocation/structured"
)

// ClassList serves a list of DeviceClasses as a
// structured.DeviceClassLister, for callers that have read the classes
// themselves rather than through an informer: tools, tests and benchmarks.
// Get fails for a class not in the list with the NotFound error of an
// informer's lister.
type ClassList []*resourceapi.DeviceClass

var _ structured.DeviceClassLister = ClassList(nil)

// List returns the classes.
func (l ClassList) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

// Get returns the class of that name.
func (l ClassList) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, class := range l {
		if class.Name == name {
			return class, nil
		}
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclass"), name)
}
