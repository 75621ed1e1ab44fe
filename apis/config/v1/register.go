package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/drasched/drasched/apis/config"
)

// SchemeGroupVersion is the version of the plugin arguments that users write:
// kubescheduler.config.k8s.io/v1, the version of KubeSchedulerConfiguration.
var SchemeGroupVersion = schema.GroupVersion{Group: config.GroupName, Version: "v1"}

var (
	// SchemeBuilder registers the v1 types, their defaults and their
	// conversions (the generated conversions register themselves through
	// localSchemeBuilder).
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds the v1 types, defaults and conversions to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &StructuredDRAArgs{})
	return nil
}

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}
