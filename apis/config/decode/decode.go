// Package decode reads StructuredDRA's arguments from a
// KubeSchedulerConfiguration file the way kube-scheduler reads them (strict
// decoding, the v1 arguments defaulted, then converted to the internal
// type), without linking kube-scheduler: it decodes with a scheme of its
// own that holds only k8s.io/kube-scheduler/config/v1 and StructuredDRA's
// argument types. Tools such as kubectl drasched fit and top use it;
// the scheduler itself loads its file through apis/config/scheme, and this
// package's tests check that both give the same arguments.
package decode

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/utils/ptr"

	"github.com/drasched/drasched/apis/config"
	configv1 "github.com/drasched/drasched/apis/config/v1"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme, serializer.EnableStrict)
)

func init() {
	utilruntime.Must(kubeschedulerv1.AddToScheme(scheme))
	utilruntime.Must(config.AddToScheme(scheme))
	utilruntime.Must(configv1.AddToScheme(scheme))
}

// Profile is one profile of a KubeSchedulerConfiguration and StructuredDRA's
// arguments in it.
type Profile struct {
	// SchedulerName is the profile's schedulerName.
	SchedulerName string
	// Args are the profile's StructuredDRA arguments, defaulted; the
	// defaults where the profile has no pluginConfig for StructuredDRA, as
	// kube-scheduler gives the plugin then.
	Args *config.StructuredDRAArgs
}

// DefaultArgs are StructuredDRA's arguments with every field defaulted.
func DefaultArgs() (*config.StructuredDRAArgs, error) {
	return internal(&configv1.StructuredDRAArgs{})
}

// Profiles decodes a KubeSchedulerConfiguration (YAML or JSON) and returns
// its profiles in file order. Unknown fields, in the file or in
// StructuredDRA's arguments, are an error, as they are for kube-scheduler.
func Profiles(data []byte) ([]Profile, error) {
	// A versioning decoder, not the bare deserializer: it is the one that
	// decodes the pluginConfig args (DecodeNestedObjects), strictly.
	obj, gvk, err := codecs.UniversalDecoder(kubeschedulerv1.SchemeGroupVersion, configv1.SchemeGroupVersion).Decode(data, nil, nil)
	if err != nil {
		return nil, err
	}
	cfg, ok := obj.(*kubeschedulerv1.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("got %s, want a %s", gvk, kubeschedulerv1.SchemeGroupVersion.WithKind("KubeSchedulerConfiguration"))
	}
	// kube-scheduler's defaults for the profiles themselves: a file
	// without profiles has one, and a single profile without a name is
	// the default scheduler.
	if len(cfg.Profiles) == 0 {
		cfg.Profiles = []kubeschedulerv1.KubeSchedulerProfile{{}}
	}
	if len(cfg.Profiles) == 1 && cfg.Profiles[0].SchedulerName == nil {
		cfg.Profiles[0].SchedulerName = ptr.To(corev1.DefaultSchedulerName)
	}
	profiles := make([]Profile, 0, len(cfg.Profiles))
	for i, p := range cfg.Profiles {
		profile := Profile{SchedulerName: ptr.Deref(p.SchedulerName, "")}
		for j, pc := range p.PluginConfig {
			if pc.Name != config.PluginName {
				continue
			}
			// DecodeNestedObjects, run by the decoder, made Args.Object
			// a *configv1.StructuredDRAArgs; "args:" left out leaves it nil.
			versioned, ok := pc.Args.Object.(*configv1.StructuredDRAArgs)
			if pc.Args.Object != nil && !ok {
				return nil, fmt.Errorf("profiles[%d].pluginConfig[%d].args: got %T, want StructuredDRAArgs", i, j, pc.Args.Object)
			}
			if versioned == nil {
				versioned = &configv1.StructuredDRAArgs{}
			}
			if profile.Args, err = internal(versioned); err != nil {
				return nil, fmt.Errorf("profiles[%d].pluginConfig[%d].args: %w", i, j, err)
			}
		}
		if profile.Args == nil {
			if profile.Args, err = DefaultArgs(); err != nil {
				return nil, err
			}
		}
		profiles = append(profiles, profile)
	}
	return profiles, nil
}

// internal defaults versioned (in place) and converts it.
func internal(versioned *configv1.StructuredDRAArgs) (*config.StructuredDRAArgs, error) {
	scheme.Default(versioned)
	args := &config.StructuredDRAArgs{}
	if err := scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("convert StructuredDRAArgs: %w", err)
	}
	return args, nil
}
