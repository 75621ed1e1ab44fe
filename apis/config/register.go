package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of kube-scheduler's configuration. Plugin
// arguments must be in it: the scheduler looks up the arguments of plugin X
// as kind XArgs in this group.
const GroupName = "kubescheduler.config.k8s.io"

// PluginName is the scheduler plugin these arguments are for; its
// arguments' kind is PluginName + "Args".
const PluginName = "StructuredDRA"

// SchemeGroupVersion is the internal version of GroupName.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

var (
	// SchemeBuilder registers the internal types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &StructuredDRAArgs{})
	return nil
}
