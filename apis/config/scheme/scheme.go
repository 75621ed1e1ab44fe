// Package scheme installs the StructuredDRA plugin's arguments into
// kube-scheduler's configuration scheme. Import it for its side effect, once,
// in the scheduler binary and in tests that load scheduler configurations:
//
//	import _ "github.com/drasched/drasched/apis/config/scheme"
//
// Afterwards a KubeSchedulerConfiguration with
//
//	pluginConfig:
//	- name: StructuredDRA
//	  args: {apiVersion: kubescheduler.config.k8s.io/v1, kind: StructuredDRAArgs}
//
// decodes, through k8s.io/kubernetes/pkg/scheduler/apis/config/scheme, into
// *config.StructuredDRAArgs with defaults applied, and a profile that enables
// StructuredDRA without a pluginConfig entry gets the default arguments, as
// in-tree plugins do.
package scheme

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kubeschedulerv1 "k8s.io/kube-scheduler/config/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/drasched/drasched/apis/config"
	configv1 "github.com/drasched/drasched/apis/config/v1"
)

func init() {
	// kube-scheduler decodes configuration files with schedscheme.Scheme but
	// defaults and converts plugin args with a second scheme that it builds,
	// on first use, from the SchemeBuilders of its own internal and v1
	// packages (GetPluginArgConversionScheme). Registering only with
	// schedscheme.Scheme fails at load time with "converting
	// .Profiles[0].PluginConfig[0].Args into internal type", and a profile
	// without explicit args would hand the plugin nil instead of defaults.
	schedconfig.SchemeBuilder.Register(config.AddToScheme)
	kubeschedulerv1.SchemeBuilder.Register(configv1.AddToScheme)
	// schedscheme.Scheme was built from those builders in its own init,
	// before the registrations above.
	utilruntime.Must(AddToScheme(schedscheme.Scheme))
}

// AddToScheme adds the internal and v1 StructuredDRAArgs, their defaults and
// conversions to a scheme. The scheduler's scheme already has them once this
// package is imported; AddToScheme is for schemes of one's own.
func AddToScheme(s *runtime.Scheme) error {
	if err := config.AddToScheme(s); err != nil {
		return err
	}
	return configv1.AddToScheme(s)
}

// DefaultArgs returns the arguments that a profile without StructuredDRA
// pluginConfig gives the plugin: v1 defaults, converted to the internal
// type. It is for tests and for callers that build frameworks by hand.
func DefaultArgs() (*config.StructuredDRAArgs, error) {
	versioned := &configv1.StructuredDRAArgs{}
	schedscheme.Scheme.Default(versioned)
	args := &config.StructuredDRAArgs{}
	if err := schedscheme.Scheme.Convert(versioned, args, nil); err != nil {
		return nil, fmt.Errorf("convert default StructuredDRAArgs: %w", err)
	}
	return args, nil
}
